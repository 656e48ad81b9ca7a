// Bundles a JavaScript worker and everything it imports (the @wasmpilot/guest SDK, shared
// modules) into one ES module for componentize-js, which cannot resolve package names.
// Imports of `wasmpilot:*` WIT interfaces stay imports (componentize-js provides them), and
// packages are resolved with the `wasmpilot-component` condition first, so the SDK picks its
// component build of the host's `log` import; for the `finalizer` world also with the
// `wasmpilot-finalizer` condition, so the SDK picks the `finalizer-inputs` import only there
// (the phase world has no such import). Installed beside rolldown by
// deploy/local/guest-toolchains.sh; usage: node bundle-js.mjs <worker.js> <out.js> [world]
import { rolldown } from 'rolldown';

const [input, output, world = 'phase'] = process.argv.slice(2);
if (!input || !output) {
  console.error('usage: node bundle-js.mjs <worker.js> <out.js> [phase|finalizer]');
  process.exit(2);
}
const conditionNames = ['wasmpilot-component', 'import', 'default'];
if (world === 'finalizer') conditionNames.unshift('wasmpilot-finalizer');
const bundle = await rolldown({
  input,
  platform: 'neutral',
  external: [/^wasmpilot:/],
  resolve: { conditionNames },
  logLevel: 'warn',
});
await bundle.write({ file: output, format: 'esm', codeSplitting: false });
await bundle.close();
