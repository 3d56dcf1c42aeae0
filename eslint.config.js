// Lint: typescript-eslint's recommended rules plus the type-aware ones that catch real gateway bugs (a promise
// nobody awaits or catches, a promise passed where a callback's return is ignored). Formatting is prettier's job.
import js from '@eslint/js';
import { createTypeScriptImportResolver } from 'eslint-import-resolver-typescript';
import importX from 'eslint-plugin-import-x';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'charts/**', 'coverage/**', '.bench-tmp/**', 'test/fixtures/reporter/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { project: './tsconfig.test.json', tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false } }],
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' },
      ],
    },
  },
  {
    // No import cycles: a value cycle means one module runs against another's half-initialised exports (TDZ errors,
    // `undefined` at import time). The TypeScript resolver reads tsconfig.test.json, so NodeNext's `./y.js` specifiers
    // resolve to y.ts. Type-only imports (`import type`, or every specifier `type`) do not count: TypeScript erases
    // them, so such a cycle never exists at run time (import-x skips them unconditionally). A dynamic `import()` in
    // the chain still counts (allowUnsafeDynamicCyclicDependency: false): it only defers the cycle, it does not remove it.
    // ignoreExternal: a package in node_modules never imports back into this repo, and following imports into its
    // .d.ts files made the rule cost about half of lint's CPU time.
    files: ['src/**/*.ts', 'test/**/*.ts'],
    plugins: { 'import-x': importX },
    settings: {
      // Without '.ts' here import-x silently skips every resolved .ts file and so never sees a cycle.
      'import-x/extensions': ['.ts', '.js', '.mjs', '.cjs'],
      'import-x/resolver-next': [
        createTypeScriptImportResolver({ project: `${import.meta.dirname}/tsconfig.test.json` }),
      ],
    },
    rules: { 'import-x/no-cycle': ['error', { ignoreExternal: true, allowUnsafeDynamicCyclicDependency: false }] },
  },
  {
    // The gateway's folders import one way, listen → forward → admit → openai → http: each uses only the folders after
    // it (docs/gateway.md, "Shape"). Type-only imports count too: a layer that names a higher layer's type cannot be
    // read or moved without it. The route processors read the model's types, never the builder that calls them.
    files: ['src/**/*.ts'],
    plugins: { 'import-x': importX },
    rules: {
      'import-x/no-restricted-paths': [
        'error',
        {
          basePath: import.meta.dirname,
          zones: [
            ['forward', ['listen']],
            ['admit', ['listen', 'forward']],
            ['openai', ['listen', 'forward', 'admit']],
            ['http', ['listen', 'forward', 'admit', 'openai']],
          ]
            .map(([target, from]) => ({
              target: `./src/gateway/${target}`,
              from: from.map((f) => `./src/gateway/${f}`),
              message: `src/gateway imports run listen → forward → admit → openai → http: ${target}/ may not import a folder before it`,
            }))
            .concat({
              target: './src/routing/process',
              from: ['./src/routing/build.ts', './src/routing/store.ts'],
              message: 'a route processor reads the model (routing/types.ts), never the builder that calls it',
            }),
        },
      ],
    },
  },
  {
    // No `{ ...x, extra }` where the request path runs or its objects are made: in Node's V8 anything after a leading spread
    // gives every object made so a hidden class of its own (10,000 routes had 9,992), and code reading such objects
    // misses its inline caches (docs/performance.md, "The hidden classes"). copyWith (src/same-shape.ts) says the same
    // with shared hidden classes; a spread alone, or properties before the first spread, are fine.
    files: [
      'src/gateway/**/*.ts',
      'src/routing/**/*.ts',
      'src/sources/**/*.ts',
      'src/observe/**/*.ts',
      'src/limits/**/*.ts',
    ],
    rules: {
      'no-restricted-syntax': [
        'error',
        {
          selector: 'ObjectExpression > SpreadElement:first-child ~ *',
          message:
            'a property after a spread gives each object its own V8 hidden class: use copyWith(base, { ... }) from src/same-shape.ts',
        },
      ],
    },
  },
  {
    // Tests read arbitrary API-server and gateway JSON by path (`obj.spec.backend.port`); `any` there is the honest
    // type. src/ stays strict.
    files: ['test/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    files: ['**/*.js', '**/*.mjs', '**/*.cjs'],
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        setInterval: 'readonly',
        clearInterval: 'readonly',
        setImmediate: 'readonly',
        Buffer: 'readonly',
        URL: 'readonly',
        fetch: 'readonly',
        performance: 'readonly',
        AbortController: 'readonly',
        AbortSignal: 'readonly',
        TextDecoder: 'readonly',
        TextEncoder: 'readonly',
        module: 'writable',
        require: 'readonly',
        __dirname: 'readonly',
        queueMicrotask: 'readonly',
        structuredClone: 'readonly',
        globalThis: 'readonly',
      },
    },
  },
);
