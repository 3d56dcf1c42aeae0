// queueing.maxWaitSeconds (SPEC §14) is bounded: a value past 2^31 ms (about 24.8 days, e.g. 3000000 meant as "no
// limit") made Node fire the queue's timer at once, and every request that waited was refused with 503 "waited in its
// queue for the longest time allowed" within a millisecond. Found by a hostile review.
import { readFileSync } from 'node:fs';
import AjvModule from 'ajv';
import { expect, test } from '@jest/globals';
import { parseConfig } from '../../src/config/load.js';

const Ajv = AjvModule as unknown as typeof AjvModule.default;
const chartSchema = JSON.parse(
  readFileSync(new URL('../../charts/servegate/values.schema.json', import.meta.url), 'utf8'),
) as { $schema: string; properties: { gateway: object } };
const chartGateway = new Ajv({ allErrors: true, strict: false }).compile({
  $schema: chartSchema.$schema,
  ...chartSchema.properties.gateway,
});
const parse = (queueing: object) => parseConfig({ queueing }, { port: 0, namespace: 'servegate' });

test('maxWaitSeconds past an hour is refused at start, naming the field; an hour is kept', () => {
  for (const maxWaitSeconds of [3_000_000, 3601]) {
    expect(() => parse({ maxWaitSeconds })).toThrow(/queueing\.maxWaitSeconds: Too big: expected number to be <=3600/);
    expect(chartGateway({ queueing: { maxWaitSeconds } })).toBe(false);
  }
  expect(parse({ maxWaitSeconds: 3600 }).queueing.maxWaitSeconds).toBe(3600);
  expect(chartGateway({ queueing: { maxWaitSeconds: 3600 } })).toBe(true);
});
