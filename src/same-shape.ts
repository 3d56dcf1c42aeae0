// Object copies that keep V8's hidden classes shared.

/**
 * A copy of `base` with `fields` set: what `{ ...base, ...fields }` means, written so that V8 gives copies of objects
 * of one shape one hidden class. A property added after a spread (`{ ...base, extra }`) gives each object made so a
 * hidden class of its own (Node 20's V8): 10,000 routes had 9,992; code reading fields of such objects finds no
 * inline cache that fits and looks every field up (docs/performance.md, "The hidden classes"). Plain property adds from an
 * empty object share V8's transitions.
 */
export function copyWith<T extends object, F extends object>(base: T, fields: F): Omit<T, keyof F> & F {
  return Object.assign({}, base, fields) as Omit<T, keyof F> & F;
}
