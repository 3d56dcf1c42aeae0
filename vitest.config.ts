import { defineConfig } from 'vitest/config';

// Integration tests open real loopback sockets and spawn processes: forks keep them isolated,
// and two workers match the 2-core CI machine.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'src/**/*.test.ts'],
    pool: 'forks',
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    reporters: ['default', './test/support/summary-reporter.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
