// Object copies that keep V8's hidden classes shared.

/**
 * `{ ...base, ...fields }` with one V8 hidden class for copies of one-shape objects: a property after a spread gives
 * each object its own (10,000 routes had 9,992), and readers miss their inline caches (docs/performance.md,
 * "The hidden classes"). Kept by test/routing/hidden-classes.test.ts and eslint.config.js (no property after a spread).
 */
export function copyWith<T extends object, F extends object>(base: T, fields: F): Omit<T, keyof F> & F {
  return Object.assign({}, base, fields) as Omit<T, keyof F> & F;
}
