// Answer heads are written in http/answers.ts only (its header comment says so; this keeps it true): no other file of
// the gateway calls writeHead, an interim head's writer (writeContinue, ...), flushHeaders or setHeader on a response, or
// puts a raw status line together.
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { expect, test } from '@jest/globals';
import { ROOT } from '../../support/paths.js';

const GATEWAY = join(ROOT, 'src', 'gateway');
const WRITER =
  /\.(?:writeHead|writeContinue|writeProcessing|writeEarlyHints|flushHeaders|setHeader)\(|\brawHead\(|HTTP\/1\.1 \$\{/;

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts'))
    .map((e) => join(e.parentPath, e.name));
}

test('no file of src/gateway but http/answers.ts writes an answer head', () => {
  const files = sources(GATEWAY);
  expect(files.length).toBeGreaterThan(20);
  const writers: string[] = [];
  for (const file of files) {
    const name = relative(GATEWAY, file);
    if (name === join('http', 'answers.ts')) continue;
    readFileSync(file, 'utf8')
      .split('\n')
      .forEach((line, i) => {
        const code = line.trimStart();
        if (!code.startsWith('//') && !code.startsWith('*') && WRITER.test(code)) writers.push(`${name}:${i + 1}`);
      });
  }
  expect(writers).toEqual([]);
});

test('the check sees a writer where there is one: answers.ts itself', () => {
  const lines = readFileSync(join(GATEWAY, 'http', 'answers.ts'), 'utf8').split('\n');
  expect(lines.filter((l) => WRITER.test(l)).length).toBeGreaterThanOrEqual(4);
});
