// Prints one plain closing line "jest: N passed, N failed, N skipped" that CI log readers understand.
// It must never read green on a red run: a test file that failed to load, or whose afterAll hook threw after its
// tests passed, carries no failed test of its own in jest's counts, so each such file counts as one failure here.
// (A beforeAll that throws already fails every test of its suite in jest-circus.)
class SummaryReporter {
  onRunComplete(_contexts, results) {
    let failed = results.numFailedTests;
    for (const file of results.testResults) {
      const fileError = file.testExecError != null || (file.failureMessage && file.numFailingTests === 0);
      if (fileError) failed += 1;
    }
    const skipped = results.numPendingTests + results.numTodoTests;
    const line = `jest: ${results.numPassedTests} passed, ${failed} failed, ${skipped} skipped`;
    // jest's own summary is written after reporters' onRunComplete; the closing line goes last.
    process.once('exit', () => process.stdout.write(`\n${line}\n`));
  }
}
module.exports = SummaryReporter;
