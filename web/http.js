// The gateway's HTTP API: where it is, and a fetch that turns a non-2xx answer into a
// GatewayError carrying the server's own words ({"error": {"code", "message"}}).

export const API = new URL("../", import.meta.url); // this file is /web/http.js; the API is at the root

export class GatewayError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** fetch against the gateway (a path relative to the API root, or an absolute URL). */
export async function api(path, init = {}) {
  let response;
  try {
    response = await fetch(new URL(path, API), init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new GatewayError(0, "unreachable", `cannot reach the gateway at ${API.origin} (${err.message})`);
  }
  if (response.ok) return response;
  let code = `http_${response.status}`;
  let message = response.statusText || "request failed";
  const body = await response.text().catch(() => "");
  try {
    const parsed = JSON.parse(body);
    if (parsed?.error) {
      code = parsed.error.code ?? code;
      message = parsed.error.message ?? message;
    }
  } catch {
    if (body.trim()) message = body.trim().slice(0, 300);
  }
  throw new GatewayError(response.status, code, message);
}

/** One line for the user: the server's message and, for HTTP errors, status and code. */
export function describe(err) {
  if (err instanceof GatewayError) {
    return err.status ? `${err.message} (HTTP ${err.status} ${err.code})` : err.message;
  }
  return err?.message ?? String(err);
}
