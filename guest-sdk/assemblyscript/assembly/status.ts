// Status codes of abi/ABI.md: host functions return them (negative on
// error) and exports return them to the host.

export const OK: i32 = 0;
export const NOT_FOUND: i32 = -1;
export const BAD_POINTER: i32 = -2;
export const BAD_HANDLE: i32 = -3;
export const BAD_OUTPUT: i32 = -4;
export const BAD_ARGUMENT: i32 = -5;
export const KEY_GROUP: i32 = -6;
export const NO_KEYED_STATE: i32 = -7;
export const STATE_ERROR: i32 = -8;
export const LIMIT: i32 = -9;
export const UNKNOWN_OPERATOR: i32 = -10;
export const GUEST_ERROR: i32 = -11;
export const NOT_IN_CALLBACK: i32 = -12;

/** statusText is a short text for a status code ("not found", "bad output", ...). */
export function statusText(st: i32): string {
  switch (st) {
    case OK: return "ok";
    case NOT_FOUND: return "not found";
    case BAD_POINTER: return "pointer out of bounds";
    case BAD_HANDLE: return "bad handle";
    case BAD_OUTPUT: return "bad output";
    case BAD_ARGUMENT: return "bad argument";
    case KEY_GROUP: return "key group not owned by this subtask";
    case NO_KEYED_STATE: return "keyed state outside a keyed context";
    case STATE_ERROR: return "state backend error";
    case LIMIT: return "limit exceeded";
    case UNKNOWN_OPERATOR: return "unknown operator";
    case GUEST_ERROR: return "guest error";
    case NOT_IN_CALLBACK: return "host call outside a callback";
  }
  return "unknown status";
}
