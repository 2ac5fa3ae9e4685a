/**
 * The image classifier's worker thread (index.ts starts it on first use): loads the model once, then
 * decodes each image it is sent and answers the model's class probabilities. Inference takes about a
 * tenth of a second of CPU per image, which would stall the event loop of an instance that also serves
 * API requests, so it runs here, beside it.
 */
import { parentPort } from 'node:worker_threads';
import sharp from 'sharp';
import { IMAGE_CLASSES, type ImageClass, type ImageProbabilities } from './mapping.js';
import type { ImageReady, ImageRequest, ImageResponse } from './protocol.js';

/** The model's input: 224×224 RGB (nsfwjs' MobileNetV2). */
const SIZE = 224;

// TensorFlow.js and nsfwjs print banners and notices on the console, which is the process's stdout and
// carries its JSON log lines: this thread says what it has to say through messages only.
for (const method of ['log', 'info', 'warn', 'debug'] as const) console[method] = () => {};

const port = parentPort;
if (!port) throw new Error('the image classifier runs as a worker thread');

type Tf = typeof import('@tensorflow/tfjs');
type Model = Awaited<ReturnType<typeof import('nsfwjs/core')['load']>>;

async function loadModel(): Promise<{ tf: Tf; model: Model }> {
  const tf = await import('@tensorflow/tfjs');
  // The WebAssembly backend ships its .wasm inside its npm package; it is about ten times faster than
  // the pure-JavaScript one (README, "Image outputs").
  await import('@tensorflow/tfjs-backend-wasm');
  if (!(await tf.setBackend('wasm'))) throw new Error('the TensorFlow.js WebAssembly backend did not start');
  // The model's topology and weights are bundled in the nsfwjs package: nothing is fetched.
  const { load } = await import('nsfwjs/core');
  const { MobileNetV2Model } = await import('nsfwjs/models/mobilenet_v2');
  const model = await load('MobileNetV2', { modelDefinitions: [MobileNetV2Model] });
  return { tf, model };
}

/** The image as the model's input: composited on white (transparency), sRGB, stretched to SIZE×SIZE. */
async function pixels(data: Uint8Array): Promise<Buffer> {
  const { data: raw, info } = await sharp(data, { animated: false })
    .flatten({ background: { r: 255, g: 255, b: 255 } })
    .toColourspace('srgb')
    .resize(SIZE, SIZE, { fit: 'fill' })
    .raw()
    .toBuffer({ resolveWithObject: true });
  if (info.channels !== 3) throw new Error(`decoded image has ${info.channels} channels`);
  return raw;
}

async function classify(tf: Tf, model: Model, request: ImageRequest): Promise<ImageResponse> {
  let raw: Buffer;
  try {
    raw = await pixels(request.data);
  } catch (error) {
    return { id: request.id, ok: false, reason: 'decode', message: (error as Error).message };
  }
  try {
    const input = tf.tensor3d(new Int32Array(raw), [SIZE, SIZE, 3], 'int32');
    const found = await model.classify(input, IMAGE_CLASSES.length).finally(() => input.dispose());
    const probabilities = Object.fromEntries(IMAGE_CLASSES.map((c) => [c, 0])) as Record<ImageClass, number>;
    for (const { className, probability } of found) probabilities[className as ImageClass] = probability;
    return { id: request.id, ok: true, probabilities: probabilities as ImageProbabilities };
  } catch (error) {
    return { id: request.id, ok: false, reason: 'model', message: (error as Error).message };
  }
}

const started = performance.now();
loadModel().then(
  ({ tf, model }) => {
    port.postMessage({ ready: true, loadMs: Math.round(performance.now() - started) } satisfies ImageReady);
    port.on('message', (request: ImageRequest) => {
      void classify(tf, model, request).then((response) => port.postMessage(response));
    });
  },
  (error: Error) => {
    port.postMessage({ ready: false, message: error.message } satisfies ImageReady);
  },
);
