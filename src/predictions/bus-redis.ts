/**
 * The distributed mode's event bus: Redis pub/sub, one channel per prediction, so whichever instance
 * holds a client's SSE stream or `Prefer: wait` request hears the worker that runs the prediction.
 *
 * Two connections per instance: one publishes, one (shared by every listener) subscribes, since a
 * subscribed Redis connection can do nothing else. A channel is subscribed while it has at least one
 * listener (reference counting), so an instance listens only to predictions someone here waits for.
 *
 * Pub/sub is fire-and-forget: a message published while the subscriber reconnects is lost. That is fine
 * for what rides on it: stream events are also in the store (replay by seq), status changes are re-read
 * from the store, and ioredis resubscribes every channel after a reconnect.
 */
import { Redis } from 'ioredis';
import type { BusMessage, EventBus } from './types.js';

export const DEFAULT_BUS_PREFIX = 'gantry:pred:bus:';

type Listener = (message: BusMessage) => void;

interface Channel {
  listeners: Set<Listener>;
  /** Whether the subscriber connection is subscribed to it (or will be once `settled` resolves). */
  subscribed: boolean;
  /** The last SUBSCRIBE/UNSUBSCRIBE in flight: changes to one channel are applied in order. */
  settled: Promise<void>;
}

export interface RedisEventBusOptions {
  url: string;
  /** Channel prefix; default 'gantry:pred:bus:'. */
  prefix?: string;
  /** Connection errors (ioredis reconnects by itself) and listeners that threw. */
  onError?: (error: Error) => void;
}

function parseMessage(payload: string): BusMessage | undefined {
  try {
    const message: unknown = JSON.parse(payload);
    if (typeof message === 'object' && message !== null && 'type' in message) return message as BusMessage;
  } catch {
    // Not ours: someone else published on a channel under our prefix.
  }
  return undefined;
}

export class RedisEventBus implements EventBus {
  private readonly publisher: Redis;
  private readonly subscriber: Redis;
  private readonly prefix: string;
  private readonly onError: (error: Error) => void;
  private readonly channels = new Map<string, Channel>();

  constructor(options: RedisEventBusOptions) {
    this.prefix = options.prefix ?? DEFAULT_BUS_PREFIX;
    this.onError = options.onError ?? (() => {});
    this.publisher = new Redis(options.url);
    this.subscriber = new Redis(options.url);
    // Without a listener ioredis logs every failed reconnect attempt to stderr.
    this.publisher.on('error', this.onError);
    this.subscriber.on('error', this.onError);
    this.subscriber.on('message', (channel: string, payload: string) => this.deliver(channel, payload));
  }

  async publish(predictionId: string, message: BusMessage): Promise<void> {
    await this.publisher.publish(this.channelOf(predictionId), JSON.stringify(message));
  }

  /** Resolves once the channel is subscribed: a message published after that reaches the listener. */
  async subscribe(predictionId: string, listener: Listener): Promise<() => void> {
    const name = this.channelOf(predictionId);
    let channel = this.channels.get(name);
    if (!channel) {
      channel = { listeners: new Set(), subscribed: false, settled: Promise.resolve() };
      this.channels.set(name, channel);
    }
    // A wrapper per subscription, so subscribing the same function twice needs two unsubscribes.
    const entry: Listener = (message) => listener(message);
    channel.listeners.add(entry);
    await this.reconcile(name, channel);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      channel.listeners.delete(entry);
      this.reconcile(name, channel).catch(this.onError);
    };
  }

  async close(): Promise<void> {
    this.channels.clear();
    await Promise.all([this.publisher, this.subscriber].map((client) => this.quit(client)));
  }

  private channelOf(predictionId: string): string {
    return `${this.prefix}${encodeURIComponent(predictionId)}`;
  }

  /** Brings the subscription in line with the listener count, after whatever change came before. */
  private reconcile(name: string, channel: Channel): Promise<void> {
    const step = channel.settled.then(async () => {
      const wanted = channel.listeners.size > 0;
      if (wanted && !channel.subscribed) {
        await this.subscriber.subscribe(name);
        channel.subscribed = true;
      } else if (!wanted && channel.subscribed) {
        channel.subscribed = false;
        if (this.channels.get(name) === channel) this.channels.delete(name);
        await this.subscriber.unsubscribe(name);
      }
    });
    // The chain goes on after a failed step; the failure reaches whoever asked for this step.
    channel.settled = step.catch(() => {});
    return step;
  }

  private deliver(name: string, payload: string): void {
    const channel = this.channels.get(name);
    if (!channel) return;
    const message = parseMessage(payload);
    if (!message) return;
    for (const listener of [...channel.listeners]) {
      try {
        listener(message);
      } catch (error) {
        this.onError(error instanceof Error ? error : new Error(String(error)));
      }
    }
  }

  private async quit(client: Redis): Promise<void> {
    try {
      await client.quit();
    } catch {
      // Not connected: nothing to say goodbye to.
    }
    client.disconnect();
  }
}
