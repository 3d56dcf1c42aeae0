// The one string order of the builder's outputs (code units, as Array.prototype.sort would, but stable to read).
export function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
