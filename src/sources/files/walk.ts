// Lists a folder tree's manifest files: ignore.ts's rules, symlinks followed (ConfigMap volumes), loops cut.
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import {
  IGNORE_FILE,
  isManifestName,
  isWalkedDirName,
  NO_IGNORES,
  parseIgnoreFile,
  type IgnoreRules,
} from './ignore.js';

export const MAX_DEPTH = 32;

export interface ListedFile {
  /** Absolute path, for reading. */
  abs: string;
  /** The path as the user would write it: the given root joined with the relative path; used in origins. */
  origin: string;
}

/**
 * The manifest files under `absRoot` sorted by origin, and every folder walked (what a watcher must watch); a
 * sub-folder that cannot be listed is skipped, a root that cannot throws.
 */
export async function walkManifestDir(
  absRoot: string,
  displayRoot: string,
  ignore: IgnoreRules,
): Promise<{ files: ListedFile[]; dirs: string[] }> {
  const out: ListedFile[] = [];
  const dirs: string[] = [];
  const st = await stat(absRoot);
  await walk(absRoot, '', 0, new Set([`${st.dev}:${st.ino}`]));
  out.sort((a, b) => (a.origin < b.origin ? -1 : a.origin > b.origin ? 1 : 0));
  return { files: out, dirs };

  async function walk(absDir: string, relDir: string, depth: number, seenDirs: Set<string>): Promise<void> {
    let entries;
    try {
      entries = await readdir(absDir, { withFileTypes: true });
    } catch (err) {
      if (!relDir) throw err;
      return;
    }
    dirs.push(absDir);
    for (const e of entries) {
      const rel = relDir ? `${relDir}/${e.name}` : e.name;
      const abs = join(absDir, e.name);
      let isDir = e.isDirectory();
      let isFile = e.isFile();
      if (e.isSymbolicLink()) {
        try {
          const s = await stat(abs);
          isDir = s.isDirectory();
          isFile = s.isFile();
        } catch {
          continue; // dangling link (e.g. an emacs lock file)
        }
      }
      if (isDir) {
        if (!isWalkedDirName(e.name) || ignore.ignores(rel, true) || depth >= MAX_DEPTH) continue;
        let dirId: string;
        try {
          const s = await stat(abs);
          dirId = `${s.dev}:${s.ino}`;
        } catch {
          continue;
        }
        if (seenDirs.has(dirId)) continue; // symlink loop or the same folder twice
        seenDirs.add(dirId);
        await walk(abs, rel, depth + 1, seenDirs);
      } else if (isFile && isManifestName(e.name) && !ignore.ignores(rel, false)) {
        out.push({ abs, origin: join(displayRoot, ...rel.split('/')) });
      }
    }
  }
}

/** Reads `<dir>/.servegateignore`; none (or unreadable) means no extra rule. */
export async function readIgnoreRules(absDir: string): Promise<IgnoreRules> {
  try {
    return parseIgnoreFile(await readFile(join(absDir, IGNORE_FILE), 'utf8'));
  } catch {
    return NO_IGNORES;
  }
}

/**
 * The manifest files the files source reads at `path` (a folder or a file), sorted, as `path`-relative paths:
 * for CLI commands that must see exactly what `servegate serve --manifests` sees. A missing path gives [].
 */
export async function listManifestFiles(path: string): Promise<string[]> {
  let st;
  try {
    st = await stat(path);
  } catch {
    return [];
  }
  if (st.isFile()) return [path];
  if (!st.isDirectory()) return [];
  const { files } = await walkManifestDir(path, path, await readIgnoreRules(path));
  return files.map((f) => f.origin);
}
