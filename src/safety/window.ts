/**
 * A stream's completion text in windows (README, "Safety"): text is added as it arrives, and a window is
 * due once `size` characters wait unchecked. Each window is classified with the end of the text before
 * it, so a word split across two windows is still seen whole.
 */

/** Characters of already-checked text classified again in front of each window. */
const OVERLAP = 64;

export interface Window {
  /** The text to classify: the overlap, then the window. */
  text: string;
  /** The window's place in the whole completion (UTF-16 offsets, end exclusive). */
  start: number;
  end: number;
}

export class TextWindows {
  private pending = '';
  private checkedTail = '';
  private checkedEnd = 0;

  constructor(readonly size: number) {}

  /** Adds text; true when a window is due. */
  add(text: string): boolean {
    this.pending += text;
    return this.pending.length >= this.size;
  }

  /** Text added and not yet taken. */
  get waiting(): number {
    return this.pending.length;
  }

  /** The offset up to which text was taken for checking. */
  get checkedUpTo(): number {
    return this.checkedEnd;
  }

  /** The waiting text as a window to check (also at the end of a stream, when it is shorter). */
  take(): Window {
    const window: Window = {
      text: this.checkedTail + this.pending,
      start: this.checkedEnd,
      end: this.checkedEnd + this.pending.length,
    };
    this.checkedEnd = window.end;
    this.checkedTail = window.text.slice(-OVERLAP);
    this.pending = '';
    return window;
  }
}
