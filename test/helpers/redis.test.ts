import { Redis } from 'ioredis';
import { expect, it } from 'vitest';
import { describeRedis, startRedis } from './redis.js';

describeRedis('test redis-server', () => {
  it('starts on its own port, keeps data across a restart with AOF, and stops', async () => {
    const redis = await startRedis({ aof: true });
    const client = new Redis(redis.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
    await client.connect();
    await client.set('k', 'v');
    client.disconnect();
    await redis.stop();
    await redis.start();
    const again = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    expect(await again.get('k')).toBe('v');
    again.disconnect();
    await redis.close();
  });
});
