/** A classifier that calls a service over HTTP: its connections are closed when Gantry stops. */
import type { TextClassifier } from '../classifier.js';

export interface RemoteClassifier extends TextClassifier {
  close(): Promise<void>;
}
