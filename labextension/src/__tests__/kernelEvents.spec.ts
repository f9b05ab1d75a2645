import { IKernelEvent, KernelEventsPoller } from '../alerts/kernelEvents';

function event(id: number, ageS: number): IKernelEvent {
  return {
    id,
    kernel_id: `k-${id}`,
    notebook_path: `n${id}.ipynb`,
    time: Date.now() / 1000 - ageS,
    kind: 'died',
    reason: 'The kernel died: killed by SIGKILL from outside the kernel',
    details: {}
  };
}

describe('KernelEventsPoller', () => {
  it('shows a new tab only fresh events, then each later one once, and asks with since', async () => {
    const shown: string[] = [];
    const notifier = { emit: (m: string) => (shown.push(m), String(shown.length)), update: () => true };
    const store = new Map<string, string>();
    const asked: (number | undefined)[] = [];
    let answer = [event(1, 3600), event(2, 5)];
    const poller = new KernelEventsPoller(
      notifier,
      { getItem: k => store.get(k) ?? null, setItem: (k, v) => void store.set(k, v) },
      async since => (asked.push(since), { events: answer.filter(e => since === undefined || e.id > since) })
    );
    await poller.update();
    expect(shown).toEqual(['n2.ipynb: The kernel died: killed by SIGKILL from outside the kernel']);
    answer = [...answer, event(3, 0)];
    await poller.update();
    await poller.update();
    expect(shown).toHaveLength(2);
    expect(asked).toEqual([undefined, 2, 3]);
    poller.dispose();
  });
});
