/** Reading the header of a PCM WAV file (RIFF/WAVE with `fmt ` and `data` chunks). */

export interface WavInfo {
  sampleRate: number;
  channels: number;
  bitsPerSample: number;
  /** Offset and length of the sample data in the file. */
  dataOffset: number;
  dataBytes: number;
  durationSeconds: number;
}

/** Parses a WAV header; throws when `wav` is not a PCM WAV file. Walks the chunks, so LIST chunks are fine. */
export function readWavInfo(wav: Uint8Array): WavInfo {
  const view = Buffer.from(wav.buffer, wav.byteOffset, wav.byteLength);
  if (
    view.length < 12 ||
    view.toString('latin1', 0, 4) !== 'RIFF' ||
    view.toString('latin1', 8, 12) !== 'WAVE'
  ) {
    throw new Error('not a RIFF/WAVE file');
  }
  let format: Pick<WavInfo, 'sampleRate' | 'channels' | 'bitsPerSample'> | undefined;
  let offset = 12;
  while (offset + 8 <= view.length) {
    const id = view.toString('latin1', offset, offset + 4);
    const size = view.readUInt32LE(offset + 4);
    const body = offset + 8;
    if (id === 'fmt ') {
      format = {
        channels: view.readUInt16LE(body + 2),
        sampleRate: view.readUInt32LE(body + 4),
        bitsPerSample: view.readUInt16LE(body + 14),
      };
    } else if (id === 'data') {
      if (!format) throw new Error('WAVE data chunk before fmt chunk');
      // A streamed WAV may carry a placeholder size; the bytes present are what counts.
      const dataBytes = Math.min(size, view.length - body);
      const bytesPerSecond = format.sampleRate * format.channels * (format.bitsPerSample / 8);
      return { ...format, dataOffset: body, dataBytes, durationSeconds: dataBytes / bytesPerSecond };
    }
    offset = body + size + (size % 2);
  }
  throw new Error('WAVE file without a data chunk');
}
