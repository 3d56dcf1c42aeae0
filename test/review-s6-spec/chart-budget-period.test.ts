// SPEC §14 / §7: the chart's values.schema.json and the gateway agree on budgetPeriod (day, month, or a rolling 1h to
// 366d). The schema's pattern `\d{1,6}[mhdw]` let `30m`, `0h`, `400d` or `53w` through `helm install`, and the gateway
// then refused the configuration at start ("must be ... a rolling duration of 1h to 366d"): a release that installs
// and crash-loops instead of a refusal at `helm install`/`upgrade`. Found by an independent check of SPEC §14.
import { readFileSync } from 'node:fs';
import AjvModule from 'ajv';
import { describe, expect, test } from '@jest/globals';
import { parseConfig } from '../../src/config/load.js';

const Ajv = AjvModule as unknown as typeof AjvModule.default;
const schema = JSON.parse(readFileSync(new URL('../../charts/servegate/values.schema.json', import.meta.url), 'utf8'));
const chartAccepts = new Ajv({ allErrors: true, strict: false }).compile({
  $schema: schema.$schema,
  ...schema.properties.gateway,
});

function gatewayAccepts(limits: object): boolean {
  try {
    parseConfig({ limits }, { port: 0, namespace: 'servegate' });
    return true;
  } catch {
    return false;
  }
}

// Each unit's bounds and the values around them (1 h to 366 d), and a sweep of the small ones.
const PERIODS = [
  'day',
  'month',
  'week',
  '',
  '12H',
  '1.5h',
  ...[0, 1, 59, 60, 61, 99, 100, 1440, 99999, 100000, 499999, 500000, 519999, 520000, 526999, 527000, 527039]
    .concat([527040, 527041, 527100, 530000, 999999])
    .map((n) => `${n}m`),
  ...Array.from({ length: 8800 }, (_, n) => `${n}h`),
  ...Array.from({ length: 400 }, (_, n) => `${n}d`),
  ...Array.from({ length: 60 }, (_, n) => `${n}w`),
];

describe('budgetPeriod: what the chart accepts, the gateway starts with', () => {
  test.each(['perProject', 'projects'])('limits.%s', (where) => {
    const wrap = (budgetPeriod: string) =>
      where === 'perProject' ? { perProject: { budgetPeriod } } : { projects: { genai: { budgetPeriod } } };
    const disagree = PERIODS.filter((p) => chartAccepts({ limits: wrap(p) }) !== gatewayAccepts(wrap(p)));
    expect(disagree).toEqual([]);
  });
});
