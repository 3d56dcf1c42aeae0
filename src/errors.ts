// The error catalogue of the commands, the configuration and key handling: every error a person sees outside the
// data plane (whose HTTP errors are src/gateway/http/errors.ts) has a stable code and an exit status. docs/errors.md
// lists them; scripts may match the codes, never the messages.

export type ErrorCode =
  /** A wrong command line: unknown flag or command, missing or malformed argument (exit 2). */
  | 'SG_USAGE'
  /** The configuration (--config FILE, chart values) is invalid; the message names the key (exit 2). */
  | 'SG_CONFIG'
  /** An API key, its name, projects or expiry is invalid (exit 1). */
  | 'SG_KEY_INVALID'
  /** The thing asked for does not exist: a key, a deployment, a manifests folder (exit 1). */
  | 'SG_NOT_FOUND'
  /** It exists but is not served (invalid spec, conflict, no backend, not Ready) (exit 1). */
  | 'SG_NOT_SERVED'
  /** A key or file of that name already exists (exit 1). */
  | 'SG_EXISTS'
  /** No cluster configured, or the API server refused or failed the call (exit 1). */
  | 'SG_CLUSTER'
  /** Anything else the command could not do (exit 1). */
  | 'SG_FAILED';

const EXIT: Record<ErrorCode, number> = {
  SG_USAGE: 2,
  SG_CONFIG: 2,
  SG_KEY_INVALID: 1,
  SG_NOT_FOUND: 1,
  SG_NOT_SERVED: 1,
  SG_EXISTS: 1,
  SG_CLUSTER: 1,
  SG_FAILED: 1,
};

export class ServegateError extends Error {
  readonly exitCode: number;
  constructor(
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
    this.name = new.target.name;
    this.exitCode = EXIT[code];
  }
}

/** A wrong command line: printed with the command's usage, exit 2. */
export class UsageError extends ServegateError {
  constructor(message: string) {
    super('SG_USAGE', message);
  }
}

/** Invalid configuration; the message names the key (and the file). Stops start-up, exit 2. */
export class ConfigError extends ServegateError {
  constructor(message: string) {
    super('SG_CONFIG', message);
  }
}

/** An invalid key, key name, project list or expiry. */
export class KeyError extends ServegateError {
  constructor(message: string) {
    super('SG_KEY_INVALID', message);
  }
}

/** A command that could not do what was asked. */
export class CommandError extends ServegateError {
  constructor(message: string, code: Exclude<ErrorCode, 'SG_USAGE' | 'SG_CONFIG' | 'SG_KEY_INVALID'> = 'SG_FAILED') {
    super(code, message);
  }
}

/** An error as a terminal shows it: `error[SG_CODE]: message`. */
export function errorLine(err: unknown): string {
  if (err instanceof ServegateError) return `error[${err.code}]: ${err.message}`;
  return `error[SG_FAILED]: ${(err as Error)?.message ?? String(err)}`;
}

/** The exit status for an error: the catalogue's, else 1. */
export function exitCodeOf(err: unknown): number {
  return err instanceof ServegateError ? err.exitCode : 1;
}
