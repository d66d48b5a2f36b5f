// The gateway's framed Opus stream (application/vnd.voice-gateway.opus-frames, version 2), parsed
// incrementally: push() the bytes as fetch() delivers them, in any chunking; next() hands out
// one complete record at a time (or null until more bytes come), so the caller decides how many
// it takes: the reader stops pulling records while its jitter buffer is full.
//
// The layout (gateway/http/frame_records.py; all integers unsigned big-endian):
//   header  "VGOF", version u8 (2), sample rate u32, frame ms u16, channels u8,
//           pre-skip u16 (48 kHz samples to drop, as in an OpusHead)     14 bytes, once
//           (version 1: no pre-skip, 12 bytes; still read, preSkip null)
//   frame   0x01, sequence u16, timestamp u32 (48 kHz, +960 a frame), length u16, Opus bytes
//   end     0x02                                            the stream ended normally
//   error   0x03, length u16, UTF-8 JSON {"code", "message"}   the stream ended on this error
// An end or error record is the last thing in the stream; a stream that stops before one is
// truncated (close() throws). Anything malformed throws MalformedStream, and the parser stays
// failed.

export const MEDIA_TYPE = "application/vnd.voice-gateway.opus-frames";
export const VERSION = 2;
export const TYPE_FRAME = 0x01;
export const TYPE_END = 0x02;
export const TYPE_ERROR = 0x03;
export const MAX_FRAME_BYTES = 1275; // one Opus packet at most (RFC 6716)
export const MAX_ERROR_BYTES = 4096;

const MAGIC = [0x56, 0x47, 0x4f, 0x46]; // "VGOF"
const HEADER_BYTES = { 1: 12, 2: 14 }; // by version
const FRAME_HEAD_BYTES = 9;
const ERROR_HEAD_BYTES = 3;

export class MalformedStream extends Error {
  constructor(message) {
    super(message);
    this.name = "MalformedStream";
  }
}

export class FrameParser {
  constructor({ maxFrameBytes = MAX_FRAME_BYTES } = {}) {
    this.maxFrameBytes = maxFrameBytes;
    this.buf = new Uint8Array(8192);
    this.start = 0; // first unread byte
    this.end = 0; // one past the last byte held
    this.header = null; // {version, sampleRate, frameMs, channels, preSkip}
    this.nextSequence = null;
    this.done = false; // the end or error record was read
    this.failed = null; // the MalformedStream that stopped it
    this.bytes = 0; // pushed so far
  }

  /** Bytes held that are not yet a complete record. */
  get buffered() {
    return this.end - this.start;
  }

  /** Append bytes (a Uint8Array): they are copied, the caller may reuse its buffer. */
  push(chunk) {
    this.check();
    if (chunk.length === 0) return;
    this.bytes += chunk.length;
    if (this.end + chunk.length > this.buf.length) {
      const held = this.end - this.start;
      const need = held + chunk.length;
      if (need <= this.buf.length / 2) {
        this.buf.copyWithin(0, this.start, this.end); // room enough once compacted
      } else {
        let size = this.buf.length;
        while (size < need * 2) size *= 2;
        const grown = new Uint8Array(size);
        grown.set(this.buf.subarray(this.start, this.end));
        this.buf = grown;
      }
      this.start = 0;
      this.end = held;
    }
    this.buf.set(chunk, this.end);
    this.end += chunk.length;
  }

  /**
   * The next complete record, or null when more bytes are needed (or the stream is over):
   *   {type: "header", version, sampleRate, frameMs, channels, preSkip}   always first
   *   {type: "frame", sequence, timestamp, data}                 data: a Uint8Array of its own
   *   {type: "end"} | {type: "error", code, message}             last
   */
  next() {
    this.check();
    try {
      const record = this.record();
      if (this.start === this.end) this.start = this.end = 0;
      return record;
    } catch (err) {
      this.failed = err;
      this.start = this.end = 0;
      throw err;
    }
  }

  /** At the end of input: throws if the stream stopped before its end or error record. */
  close() {
    this.check();
    if (!this.done) {
      this.failed = new MalformedStream(`truncated stream (${this.buffered} bytes of a record)`);
      throw this.failed;
    }
  }

  check() {
    if (this.failed) throw new MalformedStream(`stream already failed: ${this.failed.message}`);
  }

  record() {
    const { buf, start } = this;
    const held = this.end - start;
    if (this.header === null) return this.parseHeader();
    if (held === 0) return null;
    if (this.done) throw new MalformedStream("bytes after the stream's end record");
    const view = new DataView(buf.buffer, buf.byteOffset + start, held);
    const kind = buf[start];
    if (kind === TYPE_FRAME) {
      if (held < FRAME_HEAD_BYTES) return null;
      const sequence = view.getUint16(1);
      const timestamp = view.getUint32(3);
      const length = view.getUint16(7);
      if (length < 1 || length > this.maxFrameBytes) {
        throw new MalformedStream(`frame length ${length} outside 1..${this.maxFrameBytes}`);
      }
      if (this.nextSequence !== null && sequence !== this.nextSequence) {
        throw new MalformedStream(`frame ${sequence} where ${this.nextSequence} was due`);
      }
      if (held < FRAME_HEAD_BYTES + length) return null;
      const from = start + FRAME_HEAD_BYTES;
      const data = buf.slice(from, from + length);
      this.start = from + length;
      this.nextSequence = (sequence + 1) & 0xffff;
      return { type: "frame", sequence, timestamp, data };
    }
    if (kind === TYPE_END) {
      this.start += 1;
      this.done = true;
      return { type: "end" };
    }
    if (kind === TYPE_ERROR) {
      if (held < ERROR_HEAD_BYTES) return null;
      const length = view.getUint16(1);
      if (length < 1 || length > MAX_ERROR_BYTES) {
        throw new MalformedStream(`error record length ${length} outside 1..${MAX_ERROR_BYTES}`);
      }
      if (held < ERROR_HEAD_BYTES + length) return null;
      const from = start + ERROR_HEAD_BYTES;
      const body = buf.subarray(from, from + length);
      const record = parseError(body);
      this.start = from + length;
      this.done = true;
      return record;
    }
    throw new MalformedStream(`unknown record type 0x${kind.toString(16).padStart(2, "0")}`);
  }

  parseHeader() {
    const { buf, start } = this;
    const held = this.end - start;
    for (let i = 0; i < Math.min(held, MAGIC.length); i++) {
      if (buf[start + i] !== MAGIC[i]) {
        throw new MalformedStream("not a voice-gateway opus-frames stream (bad magic)");
      }
    }
    if (held <= MAGIC.length) return null;
    const version = buf[start + MAGIC.length];
    const size = HEADER_BYTES[version];
    if (size === undefined) throw new MalformedStream(`unsupported stream version ${version}`);
    if (held < size) return null;
    const view = new DataView(buf.buffer, buf.byteOffset + start, size);
    const sampleRate = view.getUint32(5);
    const frameMs = view.getUint16(9);
    const channels = view.getUint8(11);
    const preSkip = version >= 2 ? view.getUint16(12) : null;
    if (sampleRate === 0 || frameMs === 0 || (channels !== 1 && channels !== 2)) {
      throw new MalformedStream(`bad stream header (${sampleRate} Hz, ${frameMs} ms, ${channels} ch)`);
    }
    this.start += size;
    this.header = { type: "header", version, sampleRate, frameMs, channels, preSkip };
    return this.header;
  }
}

function parseError(body) {
  let value;
  try {
    value = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(body));
  } catch (err) {
    throw new MalformedStream(`error record is not UTF-8 JSON: ${err.message}`);
  }
  if (!value || typeof value.code !== "string" || typeof value.message !== "string") {
    throw new MalformedStream('error record is not {"code": str, "message": str}');
  }
  return { type: "error", code: value.code, message: value.message };
}
