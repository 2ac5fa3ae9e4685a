/** Shared pieces: an accessible modal dialog, status messages, JSON and time formatting. */
import type { ComponentChildren } from 'preact';
import { useEffect, useRef } from 'preact/hooks';

const FOCUSABLE = 'a[href], button, input, select, textarea, [tabindex]:not([tabindex="-1"])';

/**
 * A modal on the native <dialog>: showModal() makes the rest of the page inert (focus stays inside) and
 * Escape cancels it; focus goes back to what had it before the dialog opened.
 */
export function Dialog(props: { title: string; onClose: () => void; children: ComponentChildren }) {
  const ref = useRef<HTMLDialogElement>(null);
  // The latest onClose, without reopening the dialog when the parent renders a new function.
  const onClose = useRef(props.onClose);
  onClose.current = props.onClose;
  useEffect(() => {
    const dialog = ref.current;
    if (!dialog) return;
    const before = document.activeElement as HTMLElement | null;
    dialog.showModal();
    const cancel = (event: Event) => {
      event.preventDefault();
      onClose.current();
    };
    // The modal makes the page inert, but Tab would still leave for the browser's own controls: wrap it.
    const trap = (event: KeyboardEvent) => {
      if (event.key !== 'Tab') return;
      const focusable = [...dialog.querySelectorAll<HTMLElement>(FOCUSABLE)].filter(
        (el) => !el.hasAttribute('disabled') && el.getClientRects().length > 0,
      );
      const first = focusable[0];
      const last = focusable[focusable.length - 1];
      if (!first || !last) return;
      if (event.shiftKey && document.activeElement === first) {
        event.preventDefault();
        last.focus();
      } else if (!event.shiftKey && document.activeElement === last) {
        event.preventDefault();
        first.focus();
      }
    };
    dialog.addEventListener('cancel', cancel);
    dialog.addEventListener('keydown', trap);
    return () => {
      dialog.removeEventListener('cancel', cancel);
      dialog.removeEventListener('keydown', trap);
      if (dialog.open) dialog.close();
      if (!before?.isConnected) return;
      before.focus();
      // The dialog may leave the document only after this cleanup, and the browser then moves the focus
      // of a removed element to the body: give it back once that is done.
      setTimeout(() => {
        if (before.isConnected && (document.activeElement === document.body || !document.activeElement)) {
          before.focus();
        }
      }, 0);
    };
  }, []);
  return (
    <dialog ref={ref} aria-labelledby="dialog-title" class="dialog">
      <h2 id="dialog-title">{props.title}</h2>
      {props.children}
    </dialog>
  );
}

export function ErrorMessage({ error }: { error: string | null }) {
  if (!error) return null;
  return (
    <p class="error" role="alert">
      {error}
    </p>
  );
}

export function Loading() {
  return <p aria-live="polite">Loading…</p>;
}

export function when(iso: string | null | undefined): string {
  if (!iso) return '—';
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}

export function Json({ value }: { value: unknown }) {
  return <pre class="json">{JSON.stringify(value, null, 2)}</pre>;
}

export function money(value: number): string {
  return value.toLocaleString(undefined, { style: 'currency', currency: 'USD', maximumFractionDigits: 6 });
}
