// The TypeScript SDK's lint (`make lint`, after tsc's strict type check):
// ESLint's and typescript-eslint's recommended rules over the sources, the
// tests, the tools and the examples.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/", "node_modules/"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      // As tsc's noUnusedParameters: a leading underscore marks it unused on purpose.
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
    },
  },
);
