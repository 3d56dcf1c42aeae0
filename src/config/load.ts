// Reads and validates configuration; an invalid document throws ConfigError naming the key.
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { shown } from '../routing/quote.js';
import { configSchema, type Config } from './schema.js';

import { ConfigError } from '../errors.js';

export { ConfigError };

export interface RuntimeDefaults {
  /** Used for the default publicUrl http://localhost:<port>. */
  port: number;
  /** The gateway's own namespace: the default keys namespace. */
  namespace: string;
}

/** Validates a parsed document (object, null or undefined) and applies runtime defaults. */
export function parseConfig(doc: unknown, runtime: RuntimeDefaults, origin = 'config'): Config {
  if (doc === null || doc === undefined) doc = {};
  if (typeof doc !== 'object' || Array.isArray(doc)) {
    throw new ConfigError(`${origin}: the configuration must be a YAML mapping`);
  }
  const result = configSchema.safeParse(doc);
  if (!result.success) {
    const lines = result.error.issues.map((issue) => {
      // Keys are the operator's own text: shown escaped and cut, so a huge or multi-line key cannot flood or forge lines.
      let path = issue.path.map((k) => shown(String(k))).join('.');
      if (issue.code === 'unrecognized_keys') {
        const keys = issue.keys.map((k) => (path ? `${path}.${shown(k)}` : shown(k)));
        return `${keys.join(', ')}: unknown key`;
      }
      if (!path) path = '(top level)';
      return `${path}: ${issue.message}`;
    });
    throw new ConfigError(`${origin}: invalid configuration\n  ${lines.join('\n  ')}`);
  }
  const parsed = result.data;
  const publicUrl = (parsed.publicUrl ?? `http://localhost:${runtime.port}`).replace(/\/+$/, '');
  return {
    ...parsed,
    publicUrl,
    auth: { ...parsed.auth, keysNamespace: parsed.auth.keysNamespace || runtime.namespace },
  };
}

/** Reads `--config FILE` (YAML or JSON). A missing file is an error; an empty file is the defaults. */
export function loadConfigFile(file: string | undefined, runtime: RuntimeDefaults): Config {
  if (!file) return parseConfig({}, runtime);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`${file}: cannot read configuration: ${(err as Error).message}`);
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new ConfigError(`${file}: not valid YAML: ${(err as Error).message}`);
  }
  return parseConfig(doc, runtime, file);
}

/** The gateway's own namespace: POD_NAMESPACE from the downward API, else "servegate". */
export function ownNamespace(env: NodeJS.ProcessEnv = process.env): string {
  return env.POD_NAMESPACE?.trim() || 'servegate';
}
