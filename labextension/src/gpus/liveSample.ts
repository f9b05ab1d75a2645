/**
 * The newest `samples/latest?gpm=1` answer, asked only while a GPU card is on screen.
 *
 * Each such request renews the server's 30 s GPM lease: the sampler reads SM activity, tensor
 * use and per-process figures only while someone asks, so nobody pays for them when nobody
 * looks. A card tells when it enters or leaves the screen (`setCardVisible`); the model asks at
 * each tick while the panel is shown and at least one card is visible.
 *
 * It is an extra: a failed request leaves the card without GPM figures and never turns the
 * sidebar into an error state (the `samples` request of the same tick reports real trouble).
 */
import { requestAPI } from '../api/request';
import { IDeviceSample, ISnapshot } from '../api/tokens';

export class LiveSample {
  /** The GPUs of the newest answer, by index (empty when not asked, or it failed). */
  get devices(): ReadonlyMap<number, IDeviceSample> {
    return this._devices;
  }

  /** Whether some GPU card is on screen. */
  get cardsVisible(): boolean {
    return this._visible.size > 0;
  }

  /** A card entered or left the screen. Returns true when that changed whether one is visible. */
  setCardVisible(index: number, visible: boolean): boolean {
    const before = this._visible.size > 0;
    if (visible) {
      this._visible.add(index);
    } else {
      this._visible.delete(index);
    }
    return before !== this._visible.size > 0;
  }

  /** Ask the server (renewing its GPM lease); never rejects. */
  async fetch(): Promise<void> {
    try {
      const snap = await requestAPI<ISnapshot>('samples/latest', { gpm: 1 });
      this._devices = new Map((snap.devices ?? []).map(d => [d.index, d]));
      this._warned = false;
    } catch (error) {
      this._devices = new Map();
      if (!this._warned) {
        this._warned = true;
        console.warn('gpu-widgets: could not read the GPM figures (samples/latest?gpm=1)', error);
      }
    }
  }

  /** Nobody looks: forget the answer, so that old figures never show later. */
  clear(): void {
    this._devices = new Map();
  }

  private _devices: ReadonlyMap<number, IDeviceSample> = new Map();
  private _visible = new Set<number>();
  private _warned = false;
}
