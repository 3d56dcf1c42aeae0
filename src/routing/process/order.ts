// String order by code units (Array.prototype.sort's default), for the outputs of conflicts.ts and keys.ts.
export function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
