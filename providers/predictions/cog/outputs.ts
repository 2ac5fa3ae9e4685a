/** A Cog prediction's end as a BackendResult, and its growing output as stream pieces. */
import { shapeOutput } from '../outputs.js';
import { BackendError, type BackendResult, type JsonObject } from '../types.js';
import { type CogPrediction, truncate } from './client.js';

export interface OutputShape {
  /** The server's Output schema (or the catalogue's): files and concatenation are read from it. */
  schema: JsonObject | undefined;
  /** The caller asked for a stream: new text pieces of a concatenated output are reported (OutputPieces). */
  stream: boolean;
  /** The Cog server's origin: its URLs are files wherever they sit (its own uploads), others only where the schema says `format: uri`. */
  origin?: string;
}

/** The result of a terminal prediction, or the BackendError it stands for. */
export function finalResult(prediction: CogPrediction, shape: OutputShape): BackendResult {
  switch (prediction.status) {
    case 'succeeded': {
      const predictTime = prediction.metrics?.predict_time;
      return {
        outputs: [],
        output: shapeOutput(prediction.output, shape.schema, {
          ownUrl: (url) => url.origin === shape.origin,
        }),
        ...(typeof predictTime === 'number' && Number.isFinite(predictTime) ? { predictTime } : {}),
        ...(typeof prediction.logs === 'string' ? { logs: prediction.logs } : {}),
      };
    }
    case 'failed':
      // Cog's error is the model's exception text: it is what the caller needs to see.
      throw new BackendError(
        truncate(nonEmpty(prediction.error) ?? 'the model failed without an error message'),
        { retryable: false },
      );
    case 'canceled':
      throw new BackendError('the Cog server canceled the prediction', { retryable: false });
    default:
      throw new BackendError(`the Cog server answered a prediction in status ${String(prediction.status)}`, {
        retryable: true,
      });
  }
}

function nonEmpty(value: unknown): string | undefined {
  return typeof value === 'string' && value.trim() !== '' ? value : undefined;
}
