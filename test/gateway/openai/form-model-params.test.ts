// Hostile review of the multipart `model` reader (issue 31 item 3): header parameters are read as the backends' form
// parsers read them, or refused. Python's (python-multipart, through email.message) keeps the last of a repeated
// parameter and reads RFC 2231 `boundary*=`; WHATWG's (undici) keeps the first; both skip what is inside a quoted
// value. The gateway took the first match of a regular expression, anywhere in the header: a second boundary, a
// second name, or a `; name=` inside a quoted filename let the gateway check one field while a backend read another
// part as `model`.
import { describe, expect, test } from '@jest/globals';
import { formModel } from '../../../src/gateway/openai/form-model.js';

/** What the gateway reads: the model, undefined (none), or "400" when it refuses the form. */
const read = (body: string, ct: string): string | undefined => {
  const m = formModel(Buffer.from(body, 'latin1'), ct);
  return m instanceof Error ? '400' : m?.value;
};

/** A form of boundary A whose one file part holds, as its bytes, a whole form of boundary B naming "theirs". */
const nested =
  `--A\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n` +
  `--B\r\nContent-Disposition: form-data; name="model"\r\n\r\ntheirs\r\n--B--\r\n` +
  `\r\n--A--\r\n`;

describe('the Content-Type boundary', () => {
  test.each([
    ['boundary twice', 'multipart/form-data; boundary=A; boundary=B'],
    ['boundary twice, in other cases', 'multipart/form-data; boundary=A; BOUNDARY=B'],
    ['boundary and boundary*= (RFC 2231)', "multipart/form-data; boundary=A; boundary*=utf-8''B"],
    ['a boundary only inside a quoted parameter', 'multipart/form-data; charset="x; boundary=A"; boundary=B'],
    ['a parameter run on after its quoted value', 'multipart/form-data; boundary="A"x; boundary=B'],
  ])('%s: refused or read as the backend reads it, never the model-less reading', (_what, ct) => {
    // Read with boundary B (the last, or the only real one), the form names "theirs": never "no model".
    expect(['400', 'theirs']).toContain(read(nested, ct));
  });

  test('one boundary, quoted or not, among other parameters, still reads', () => {
    const form = `--A\r\nContent-Disposition: form-data; name="model"\r\n\r\nmine\r\n--A--\r\n`;
    expect(read(form, 'multipart/form-data; charset=utf-8; boundary="A"')).toBe('mine');
    expect(read(form, 'multipart/form-data;boundary=A ; charset="a;b"')).toBe('mine');
  });
});

describe('the part name', () => {
  const part = (disposition: string) =>
    `--A\r\nContent-Disposition: ${disposition}\r\n\r\ntheirs\r\n--A\r\nContent-Disposition: form-data; name="x"\r\n\r\n1\r\n--A--\r\n`;
  test.each([
    ['name twice', 'form-data; name="file"; name="model"'],
    ['name twice, in other cases', 'form-data; name="file"; NAME="model"'],
    ['"; name=" inside a quoted filename', 'form-data; filename="a; name=file"; name="model"'],
  ])('%s: refused or read as "model"', (_what, disposition) => {
    expect(['400', 'theirs']).toContain(read(part(disposition), 'multipart/form-data; boundary=A'));
  });
});
