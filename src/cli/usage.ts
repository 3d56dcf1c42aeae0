// `servegate usage [--key NAME] [--project P]`: what budgets (SPEC §14) have spent and have left, asked of a running
// gateway's admin listener (/budgets): it knows every budget (key Secrets, projects) and where each is counted.
import type { Command } from 'commander';
import { CommandError } from '../errors.js';
import type { BudgetUsage } from '../limits/budget-usage.js';
import { choice, command, processIo, run, type CliIo } from './io.js';

interface UsageFlags {
  admin: string;
  key?: string;
  project?: string;
  output: 'table' | 'json';
}

export function usageProgram(io: CliIo): Command {
  return command('usage', io)
    .description("Print what each key's and project's budget has spent this period and what is left")
    .option(
      '--admin <url>',
      "a gateway's admin listener (kubectl port-forward svc/servegate-admin 9090)",
      'http://127.0.0.1:9090',
    )
    .option('--key <name>', 'only this key')
    .option('--project <p>', 'only this project')
    .addOption(choice('-o, --output <format>', 'output format', ['table', 'json']).default('table'))
    .action(async (flags: UsageFlags) => {
      const q = new URLSearchParams();
      if (flags.key !== undefined) q.set('key', flags.key);
      if (flags.project !== undefined) q.set('project', flags.project);
      const url = `${flags.admin.replace(/\/+$/, '')}/budgets${q.size ? `?${q}` : ''}`;
      let body: { shared?: boolean; budgets?: BudgetUsage[]; error?: string };
      try {
        const res = await fetch(url, { signal: AbortSignal.timeout(10_000) });
        body = (await res.json()) as typeof body;
      } catch (err) {
        throw new CommandError(`cannot read ${url}: ${(err as Error).message}`);
      }
      if (body.error !== undefined || !body.budgets) throw new CommandError(`${url}: ${body.error ?? 'no budgets'}`);
      if (flags.output === 'json') return io.stdout(`${JSON.stringify(body, null, 2)}\n`);
      if (body.budgets.length === 0) {
        // Say what was asked for: a misspelt key name gets no budget rather than a claim that none is set anywhere.
        const asked = [
          flags.key !== undefined ? `key "${flags.key}"` : '',
          flags.project !== undefined ? `project "${flags.project}"` : '',
        ].filter(Boolean);
        return io.stderr(
          asked.length
            ? `no budget is set for ${asked.join(' or ')} (servegate keys list shows each key's budget)\n`
            : 'no budgets are set\n',
        );
      }
      const rows = [['SCOPE', 'NAME', 'PERIOD', 'TOKENS SPENT', 'TOKENS LEFT', 'COST SPENT', 'COST LEFT', 'RESETS IN']];
      for (const b of body.budgets)
        rows.push([
          b.scope,
          b.name,
          b.period,
          String(b.spentTokens),
          b.remainingTokens === undefined ? '-' : `${b.remainingTokens} of ${b.limitTokens}`,
          b.spentCost,
          b.remainingCost === undefined ? '-' : `${b.remainingCost} of ${b.limitCost}`,
          `${b.resetSeconds}s`,
        ]);
      const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
      io.stdout(
        rows
          .map(
            (r) =>
              r
                .map((c, i) => c.padEnd(widths[i]))
                .join('   ')
                .trimEnd() + '\n',
          )
          .join(''),
      );
      if (!body.shared)
        io.stderr('note: this gateway counts budgets alone (no limits.redis.url): other replicas count their own\n');
    });
}

/** `servegate usage ...` with `argv` after "usage". */
export async function usageCommand(argv: string[], io: CliIo = processIo()): Promise<number> {
  return run(command('servegate', io).addCommand(usageProgram(io)), ['usage', ...argv], io);
}
