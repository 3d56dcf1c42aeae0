// Where the repository's parts are, for tests that read files or start the built CLI.
import { join } from 'node:path';

export const ROOT = join(import.meta.dirname, '..', '..');
/** The built command line (npm test builds before jest runs; SERVEGATE_CLI: another build of it). */
export const CLI = process.env.SERVEGATE_CLI ?? join(ROOT, 'dist', 'cli', 'main.js');
