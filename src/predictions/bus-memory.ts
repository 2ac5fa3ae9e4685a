import type { BusMessage, EventBus } from './types.js';

type Listener = (message: BusMessage) => void;

/** The embedded event bus: listeners in this process, called synchronously in publish order. */
export class MemoryEventBus implements EventBus {
  private readonly listeners = new Map<string, Set<Listener>>();

  async publish(predictionId: string, message: BusMessage) {
    const set = this.listeners.get(predictionId);
    if (!set) return;
    for (const listener of [...set]) listener(message);
  }

  async subscribe(predictionId: string, listener: Listener) {
    let set = this.listeners.get(predictionId);
    if (!set) {
      set = new Set();
      this.listeners.set(predictionId, set);
    }
    set.add(listener);
    return () => {
      const current = this.listeners.get(predictionId);
      if (!current) return;
      current.delete(listener);
      if (current.size === 0) this.listeners.delete(predictionId);
    };
  }

  async close() {
    this.listeners.clear();
  }
}
