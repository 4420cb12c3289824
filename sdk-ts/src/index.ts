export * from "./errors.js";
export * from "./canonical.js";
export * from "./chain.js";
export * from "./contentref.js";
export * from "./redaction.js";
