// Jest runs the suite as native ESM (`node --experimental-vm-modules`), transpiling TypeScript with @swc/jest:
// no type-checking here, since `tsc -p tsconfig.test.json` type-checks src and tests before the run (npm test).
// Integration tests open real loopback sockets and spawn processes; two workers match the 2-core CI machine.
/** @type {import('jest').Config} */
export default {
  testEnvironment: 'node',
  roots: ['<rootDir>/test', '<rootDir>/src'],
  testMatch: ['**/*.test.ts'],
  extensionsToTreatAsEsm: ['.ts'],
  // Sources import './x.js' (NodeNext); under jest the .ts file is what exists.
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  transform: {
    '^.+\\.ts$': [
      '@swc/jest',
      {
        jsc: { parser: { syntax: 'typescript' }, target: 'es2022' },
        module: { type: 'es6' },
        sourceMaps: 'inline',
      },
    ],
  },
  maxWorkers: 2,
  testTimeout: 30_000,
  reporters: ['default', '<rootDir>/test/support/summary-reporter.cjs'],
};
