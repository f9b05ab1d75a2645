/**
 * A value shown for a moment after an action (a copy button's "Copied"), then gone again.
 */
import * as React from 'react';

/** `[value, flash]`: `flash(v)` shows `v` for `ms`, then the value is null again. */
export function useFlash<T>(ms: number): [T | null, (value: T) => void] {
  const [value, setValue] = React.useState<T | null>(null);
  React.useEffect(() => {
    if (value === null) {
      return;
    }
    const timer = window.setTimeout(() => setValue(null), ms);
    return () => window.clearTimeout(timer);
  }, [value, ms]);
  return [value, setValue];
}
