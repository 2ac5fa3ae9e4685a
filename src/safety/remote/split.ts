/**
 * Long texts → pieces a remote service takes (README, "External classifiers"): every character is
 * checked, none dropped. A piece ends at the last whitespace in its final tenth when there is one, so
 * words stay whole; a surrogate pair is never cut in two.
 */
export function splitText(text: string, maxChars: number): string[] {
  if (text.length <= maxChars) return [text];
  const pieces: string[] = [];
  let start = 0;
  while (text.length - start > maxChars) {
    let end = start + maxChars;
    const floor = end - Math.floor(maxChars / 10);
    let cut = end;
    while (cut > floor && !isSpace(text.charCodeAt(cut - 1))) cut--;
    if (cut > floor) end = cut;
    else if (isHighSurrogate(text.charCodeAt(end - 1))) end--;
    pieces.push(text.slice(start, end));
    start = end;
  }
  pieces.push(text.slice(start));
  return pieces;
}

function isSpace(code: number): boolean {
  return code === 0x20 || code === 0x0a || code === 0x09 || code === 0x0d;
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}
