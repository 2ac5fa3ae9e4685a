/**
 * Output files in an S3-compatible bucket (`predictions.storage.kind: s3`): the prediction's links are the
 * bucket's pre-signed URLs, the bytes land in the bucket, and the retention purge empties it. The bucket is
 * a real HTTP server that verifies SigV4 signatures (test/helpers/fake-s3.ts).
 */
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FakeS3, startFakeS3 } from '../helpers/fake-s3.js';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';

describe('output files in an S3 bucket', () => {
  let s3: FakeS3;
  let gantry: TestGantry;
  const headers = () => ({ authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' });

  beforeAll(async () => {
    s3 = await startFakeS3();
    const config = `${LOCAL_CONFIG}
  - namespace: gantry/local-image
    name: Local image
    type: image
    vendor: { name: Gantry, slug: gantry }
    serves: [predictions]
    routes: [{ provider: local, model: local-image }]
predictions:
  retention_minutes: 0.03
  storage:
    kind: s3
    endpoint: ${s3.origin}
    region: ${s3.region}
    bucket: ${s3.bucket}
    prefix: outputs
    access_key_env: S3_KEY
    secret_key_env: S3_SECRET
    force_path_style: true
`;
    gantry = await startGantry(config, { S3_KEY: s3.accessKeyId, S3_SECRET: s3.secretAccessKey });
  });
  afterAll(async () => {
    await gantry?.close();
    await s3?.close();
  });

  it('stores outputs in the bucket, links them pre-signed, and purges them after the retention window', async () => {
    const res = await fetch(`${gantry.baseURL}/predictions`, {
      method: 'POST',
      headers: headers(),
      body: JSON.stringify({
        model: 'gantry/local-image',
        input: { prompt: 'a lighthouse', width: 96, height: 64, num_outputs: 2, output_format: 'webp' },
        await: true,
      }),
    });
    expect(res.status).toBe(200);
    const prediction = (await res.json()) as {
      id: string;
      status: string;
      output: string[];
      metadata: { storage: { files: Array<{ name: string; size: number; type: string; url: string }> } };
    };
    expect(prediction.status).toBe('succeeded');
    expect(prediction.output).toHaveLength(2);
    expect([...s3.objects().keys()].sort()).toEqual([
      `outputs/${prediction.id}/output_0.webp`,
      `outputs/${prediction.id}/output_1.webp`,
    ]);
    for (const [i, url] of prediction.output.entries()) {
      expect(url.startsWith(`${s3.origin}/${s3.bucket}/outputs/${prediction.id}/`)).toBe(true);
      expect(url).toContain('X-Amz-Signature=');
      const file = await fetch(url);
      expect(file.status).toBe(200);
      expect(file.headers.get('content-type')).toBe('image/webp');
      const bytes = Buffer.from(await file.arrayBuffer());
      expect(bytes.length).toBe(prediction.metadata.storage.files[i]?.size);
      const meta = await sharp(bytes).metadata();
      expect([meta.format, meta.width, meta.height]).toEqual(['webp', 96, 64]);
    }

    // retention_minutes 0.03 = 1.8 s; the purge runs every quarter of it.
    const deadline = Date.now() + 10_000;
    let after: { output: unknown; metadata: { data_available: boolean; storage: { files: unknown[] } } };
    do {
      await new Promise((r) => setTimeout(r, 200));
      after = (await (
        await fetch(`${gantry.baseURL}/predictions/${prediction.id}`, { headers: headers() })
      ).json()) as typeof after;
    } while (after.metadata.data_available && Date.now() < deadline);
    expect(after.metadata.data_available).toBe(false);
    expect(after.metadata.storage.files).toEqual([]);
    expect(after.output).toBeNull();
    expect(s3.objects().size).toBe(0);
  });
});
