// wstream guest SDK for AssemblyScript: write stream operators and compile
// them to one WebAssembly module for wstream (abi/ABI.md). See README.md.
//
//     import { Operator, Context, Record, register } from "<sdk>/assembly/index";
//     export * from "<sdk>/assembly/exports";

export {
  ABI_VERSION, EVENT_TIME, PROCESSING_TIME, LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR, MIN_WATERMARK, MAX_WATERMARK,
  Operator, Context, Record, Timer, ValueState, MapState, MapIterator, register, setPlan,
  MigrateFn, registerMigration, failMigration,
} from "./wstream";
export {
  OK, NOT_FOUND, BAD_POINTER, BAD_HANDLE, BAD_OUTPUT, BAD_ARGUMENT, KEY_GROUP, NO_KEYED_STATE, STATE_ERROR, LIMIT,
  UNKNOWN_OPERATOR, GUEST_ERROR, NOT_IN_CALLBACK, statusText,
} from "./status";
export {
  Bytes, utf8, str, copyBytes, bytesEqual, encodeI64LE, decodeI64LE, encodeI64BE, decodeI64BE, formatI64,
  parseDecimal, parseStatus, PARSE_OK, PARSE_SYNTAX, PARSE_RANGE, quote, quoteString,
} from "./bytes";
