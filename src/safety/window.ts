/**
 * A stream's completion text in windows (README, "Safety"): text is added as it arrives, and a window is
 * due once at least `size` characters wait unchecked and they end a sentence, or at the latest once
 * MAX_WINDOW characters wait. Ending windows at sentences matters under `block`: a window that stopped
 * after "I am going to kill" would be judged on half a threat and released before the rest arrives.
 * Each window is also classified with the end of the text before it, so a sentence cut by MAX_WINDOW is
 * still seen across the cut.
 */

/** Characters of already-checked text classified again in front of each window. */
const OVERLAP = 64;

/** The longest a window waits for a sentence to end (the most text `block` holds back at once). */
export const MAX_WINDOW = 1000;

/** The text ends a sentence or a line (closing quotes, brackets and spaces may follow). */
const SENTENCE_END = /[.!?;:\n]["')\]*_`\s]*$/;

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
    const waiting = this.pending.length;
    return waiting >= MAX_WINDOW || (waiting >= this.size && SENTENCE_END.test(text));
  }

  /** Text added and not yet taken. */
  get waiting(): number {
    return this.pending.length;
  }

  /**
   * How many more characters fit in the window before it reaches MAX_WINDOW: under block a delta longer
   * than this is cut, so no check (and no release) ever covers more than MAX_WINDOW characters.
   */
  get room(): number {
    return MAX_WINDOW - this.pending.length;
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
