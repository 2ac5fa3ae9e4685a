/**
 * Every match of a global regular expression, as `text.matchAll(re)` finds them, without the copy of
 * the expression that matchAll makes on each call: for the large word lists here that copy alone cost
 * several microseconds a text, more than the search. Synchronous, so sharing the expression's lastIndex
 * is safe.
 */
export function allMatches(re: RegExp, text: string): RegExpExecArray[] {
  const found: RegExpExecArray[] = [];
  re.lastIndex = 0;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    found.push(m);
    if (m[0].length === 0) re.lastIndex++;
  }
  return found;
}
