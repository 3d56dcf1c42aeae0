// `expect(actual, message)`: jest's expect with an optional message that is put in front of a failure, so a check
// inside a loop or over a list says which item failed (vitest had this built in; jest does not).
import { expect as jestExpect } from '@jest/globals';

type Matchers = ReturnType<typeof jestExpect>;

function withMessage<T extends object>(target: T, message: string): T {
  return new Proxy(target, {
    get(obj, prop, receiver) {
      const value = Reflect.get(obj, prop, receiver);
      if (typeof value === 'function') {
        return (...args: unknown[]) => {
          const prefix = (err: unknown): never => {
            if (err instanceof Error) err.message = `${message}\n\n${err.message}`;
            throw err;
          };
          try {
            const out = (value as (...a: unknown[]) => unknown).apply(obj, args);
            return out instanceof Promise ? out.catch(prefix) : out;
          } catch (err) {
            return prefix(err);
          }
        };
      }
      // .not, .resolves, .rejects: matcher sets of their own
      return value !== null && typeof value === 'object' ? withMessage(value as object, message) : value;
    },
  });
}

function expectWithMessage(actual: unknown, message?: string): Matchers {
  const matchers = jestExpect(actual);
  return message === undefined ? matchers : withMessage(matchers, message);
}

export const expect = Object.assign(expectWithMessage, jestExpect) as typeof jestExpect &
  ((actual: unknown, message?: string) => Matchers);
