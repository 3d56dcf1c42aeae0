// The gateway's folders import one way (listen → forward → admit → openai → http, docs/gateway.md "Shape") and no
// import cycle exists in src/, type-only ones included: the repository's own lint rule refuses a wrong import, and
// scripts/import-cycles.mjs finds a cycle only types make (eslint's no-cycle skips those).
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, test } from '@jest/globals';
import { ESLint, type Linter } from 'eslint';

const root = join(import.meta.dirname, '../..');
// Imported by its URL: a JavaScript module without a declaration file.
const { default: config } = (await import(pathToFileURL(join(root, 'eslint.config.js')).href)) as {
  default: Linter.Config[];
};
const run = promisify(execFile);

/** The repository's import-x blocks (the resolver and the direction rule) alone: no type information needed. */
async function directionErrors(file: string, text: string): Promise<string[]> {
  const blocks = config.filter(
    (c) => c.rules?.['import-x/no-restricted-paths'] !== undefined || c.settings?.['import-x/resolver-next'],
  );
  expect(blocks.some((c) => c.rules?.['import-x/no-restricted-paths'] !== undefined)).toBe(true);
  const parser = config.find((c) => c.languageOptions?.parser)?.languageOptions?.parser;
  const eslint = new ESLint({
    cwd: root,
    overrideConfigFile: true,
    overrideConfig: [
      { files: ['**/*.ts'], languageOptions: { parser } },
      ...blocks.map((c) => ({
        ...c,
        rules: { 'import-x/no-restricted-paths': c.rules?.['import-x/no-restricted-paths'] ?? 'off' },
      })),
    ],
  });
  const [result] = await eslint.lintText(text, { filePath: join(root, file) });
  expect(result.fatalErrorCount).toBe(0);
  return result.messages.map((m) => `${m.ruleId}: ${m.message}`);
}

describe('the import direction rule', () => {
  test.each([
    ['src/gateway/http/x.ts', "import type { Conn } from '../listen/connection.js';", 'http/'],
    ['src/gateway/http/x.ts', "import { grantsProject } from '../admit/auth.js';", 'http/'],
    ['src/gateway/openai/x.ts', "import { hash32 } from '../forward/targets.js';", 'openai/'],
    ['src/gateway/openai/x.ts', "import { authError } from '../admit/auth.js';", 'openai/'],
    ['src/gateway/admit/x.ts', "import type { PlaneContext } from '../forward/context.js';", 'admit/'],
    ['src/gateway/forward/x.ts', "export { Conn } from '../listen/connection.js';", 'forward/'],
  ])('%s: %s is refused', async (file, line, folder) => {
    const errors = await directionErrors(file, `${line}\nexport const _x = 1;\n`);
    expect(errors).toEqual([expect.stringContaining(`import-x/no-restricted-paths`)]);
    expect(errors[0]).toContain(`${folder} may not import a folder before it`);
  });

  test('a route processor may not import the builder', async () => {
    const errors = await directionErrors(
      'src/routing/process/x.ts',
      "import type { BuildCache } from '../build.js';\n",
    );
    expect(errors).toEqual([expect.stringContaining('never the builder that calls it')]);
  });

  test.each([
    ['src/gateway/listen/x.ts', "import { Exchange } from '../forward/exchange.js';"],
    ['src/gateway/forward/x.ts', "import { admit } from '../admit/pipeline.js';"],
    ['src/gateway/admit/x.ts', "import { selectModel } from '../openai/by-model.js';"],
    ['src/gateway/openai/x.ts', "import { gatewayError } from '../http/errors.js';"],
    ['src/routing/process/x.ts', "import type { BuildOptions } from '../types.js';"],
  ])('%s: %s is allowed', async (file, line) => {
    expect(await directionErrors(file, `${line}\nexport const _x = 1;\n`)).toEqual([]);
  });
});

describe('scripts/import-cycles.mjs', () => {
  const dir = mkdtempSync(join(tmpdir(), 'import-cycles-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  async function cycles(files: Record<string, string>): Promise<{ code: number; out: string }> {
    const at = mkdtempSync(join(dir, 'src-'));
    for (const [name, text] of Object.entries(files)) writeFileSync(join(at, name), text);
    try {
      const { stdout } = await run(process.execPath, [join(root, 'scripts/import-cycles.mjs'), at], { cwd: root });
      return { code: 0, out: stdout };
    } catch (err) {
      const e = err as { code: number; stdout: string };
      return { code: e.code, out: e.stdout };
    }
  }

  test('a cycle of type-only imports is found and fails the run', async () => {
    const r = await cycles({
      'a.ts': "import type { B } from './b.js';\nexport type A = { b?: B };\n",
      'b.ts': "import type { A } from './a.js';\nexport type B = { a?: A };\n",
      'c.ts': "import type { A } from './a.js';\nexport type C = A;\n",
    });
    expect(r.code).toBe(1);
    expect(r.out).toContain('import cycles in');
    expect(r.out).toMatch(/: 1\n {2}2 files, e\.g\. (a\.ts -> b\.ts -> a\.ts|b\.ts -> a\.ts -> b\.ts)\n/);
  });

  test('imports that only run one way pass', async () => {
    const r = await cycles({
      'a.ts': "import type { B } from './b.js';\nexport type A = { b?: B };\n",
      'b.ts': 'export type B = { n: number };\n',
    });
    expect(r).toEqual({ code: 0, out: expect.stringContaining(': 0\n') });
  });

  test('src/ has none', async () => {
    const { stdout } = await run(process.execPath, [join(root, 'scripts/import-cycles.mjs')], { cwd: root });
    expect(stdout).toContain('(type-only imports included): 0\n');
  });
});
