// Which paths of a manifests folder are read: *.yaml, *.yml, *.json, minus dotfiles, editor temp files,
// node_modules and the patterns of an optional `.servegateignore` (a small gitignore subset).

export const IGNORE_FILE = '.servegateignore';

const MANIFEST_EXT = /\.(ya?ml|json)$/i;

/** True for a file name the files source reads. */
export function isManifestName(name: string): boolean {
  if (name.startsWith('.') || name.startsWith('#')) return false; // dotfiles, emacs .#lock and #autosave#
  if (name.endsWith('~') || /\.(swp|swx|swo|tmp|bak|orig)$/i.test(name)) return false; // editor backups and swap files
  return MANIFEST_EXT.test(name);
}

/** True for a directory name the files source descends into. */
export function isWalkedDirName(name: string): boolean {
  return !name.startsWith('.') && name !== 'node_modules';
}

interface Pattern {
  re: RegExp;
  dirOnly: boolean;
  /** Matched against the whole relative path (it had a '/'), else against the last segment only. */
  anchored: boolean;
}

export interface IgnoreRules {
  ignores(relPath: string, isDir: boolean): boolean;
  /** Lines that could not be used, for the source's problem list. */
  problems: string[];
}

export const NO_IGNORES: IgnoreRules = { ignores: () => false, problems: [] };

/**
 * Parses `.servegateignore`: one pattern a line, `#` comments, `*` `?` `**` globs, a trailing `/` for directories,
 * a pattern containing `/` is relative to the folder root, otherwise it matches a name at any depth.
 */
export function parseIgnoreFile(text: string): IgnoreRules {
  const patterns: Pattern[] = [];
  const problems: string[] = [];
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (!line || line.startsWith('#')) return;
    if (line.startsWith('!')) {
      problems.push(`${IGNORE_FILE}:${i + 1}: negated patterns ("${line}") are not supported; line ignored`);
      return;
    }
    let p = line;
    const dirOnly = p.endsWith('/');
    if (dirOnly) p = p.replace(/\/+$/, '');
    const anchored = p.includes('/');
    p = p.replace(/^\/+/, '');
    if (!p) return;
    patterns.push({ re: globToRegExp(p), dirOnly, anchored });
  });
  return {
    problems,
    ignores(relPath: string, isDir: boolean): boolean {
      const base = relPath.slice(relPath.lastIndexOf('/') + 1);
      return patterns.some((pt) => (!pt.dirOnly || isDir) && pt.re.test(pt.anchored ? relPath : base));
    },
  };
}

function globToRegExp(glob: string): RegExp {
  let re = '';
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i];
    if (c === '*') {
      if (glob[i + 1] === '*') {
        i++;
        if (glob[i + 1] === '/') {
          i++;
          re += '(?:.*/)?';
        } else re += '.*';
      } else re += '[^/]*';
    } else if (c === '?') re += '[^/]';
    else re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${re}$`);
}
