// The budget and queueing fields `servegate keys create|update` write (SPEC §14) are written as the gateway reads
// them: a period or tenant given with spaces (`--budget-period " 12h"`, as a shell variable often holds it) was
// written with them, so `keys list` and the Secret showed " 12h"; a tenant of spaces alone was written and then read
// by the gateway as no tenant. Found by a hostile review.
import { describe, expect, test } from '@jest/globals';
import { KeyError, keyFields } from '../../src/keys/index.js';

describe('keyFields', () => {
  test('a period and a tenant are written trimmed', () => {
    expect(keyFields({ budgetPeriod: ' 12h ', tenant: ' team-a ' })).toEqual({ budgetPeriod: '12h', tenant: 'team-a' });
    expect(keyFields({ budgetPeriod: 'month\t' })).toEqual({ budgetPeriod: 'month' });
  });

  test('a tenant of spaces alone is refused, as an empty one is', () => {
    expect(() => keyFields({ tenant: '   ' })).toThrow(KeyError);
    expect(() => keyFields({ tenant: '   ' })).toThrow('--tenant must be 1-253 characters');
  });
});
