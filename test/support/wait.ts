// The one wait in the tests: poll `check` until it passes — returns anything but `false` without throwing — or the
// time is up; then fail naming what was awaited and the last failure seen. Bounded, never a fixed sleep.
export async function waitFor<T>(
  check: () => T | Promise<T>,
  what = 'the check to pass',
  timeoutMs = 5000,
  intervalMs = 20,
): Promise<Exclude<T, false>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let failure: unknown;
    try {
      const v = await check();
      if (v !== false) return v as Exclude<T, false>;
    } catch (err) {
      failure = err;
    }
    if (Date.now() > deadline) {
      if (failure instanceof Error) {
        failure.message = `timed out after ${timeoutMs} ms waiting for ${what}: ${failure.message}`;
        throw failure;
      }
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/**
 * A fixed pause. Only where time passing is itself the stimulus (a client trickling bytes, an entry outliving its TTL)
 * or the window in which something must not happen; every use says which. Unref'd: a backend still sleeping in a
 * handler (a 10 s delay the gateway gave up on) must not hold a jest worker open after its tests are done.
 */
export const sleep = (ms: number): Promise<void> => new Promise<void>((r) => setTimeout(r, ms).unref());
