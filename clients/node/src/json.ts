/**
 * JSON as the contract carries it: a leaf every other module may import (`values.ts` and
 * `errors.ts` both do), re-exported from `values.ts`.
 */

/** A JSON value: finite numbers only, objects with string keys. */
export type JsonValue =
  | null
  | boolean
  | number
  | string
  | readonly JsonValue[]
  | { readonly [key: string]: JsonValue };

/** A JSON object. */
export type JsonObject = { readonly [key: string]: JsonValue };
