/** Client routes under /console/: the History API, real <a href> links (open in a new tab works). */
import type { ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';

export const BASE = '/console';
const CHANGE = 'console:navigate';

export function navigate(to: string, replace = false): void {
  const url = to.startsWith(BASE) ? to : `${BASE}${to}`;
  if (replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  window.dispatchEvent(new Event(CHANGE));
}

/** The path after /console (always starting with /) and the query, re-rendered on navigation. */
export function useLocation(): { path: string; search: URLSearchParams } {
  const read = () => ({
    path: location.pathname.slice(BASE.length) || '/',
    search: new URLSearchParams(location.search),
  });
  const [loc, setLoc] = useState(read);
  useEffect(() => {
    const update = () => setLoc(read());
    window.addEventListener('popstate', update);
    window.addEventListener(CHANGE, update);
    return () => {
      window.removeEventListener('popstate', update);
      window.removeEventListener(CHANGE, update);
    };
  }, []);
  return loc;
}

interface LinkProps {
  to: string;
  children: ComponentChildren;
  'aria-current'?: 'page' | undefined;
}

export function Link({ to, children, 'aria-current': current }: LinkProps) {
  const href = `${BASE}${to}`;
  const onClick = (event: MouseEvent) => {
    if (event.defaultPrevented || event.button !== 0) return;
    if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    navigate(to);
  };
  return (
    <a href={href} onClick={onClick} aria-current={current}>
      {children}
    </a>
  );
}
