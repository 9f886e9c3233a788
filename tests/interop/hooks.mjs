const shim = new URL('./glob-shim.mjs', import.meta.url).href;
// The conformance package (0.1.16 and 0.2.x) imports `globSync` from `fs` under a
// one-letter alias; on a Node without it, the import is dropped and the one call
// (`**/checks.json`) goes to the shim.
export async function load(url, context, nextLoad) {
  const result = await nextLoad(url, context);
  if (url.includes('@modelcontextprotocol/conformance/dist/') && result.source) {
    let source = String(result.source);
    const alias = /globSync as (\w+),/.exec(source);
    if (alias) {
      const shebang = source.startsWith('#!') ? source.slice(0, source.indexOf('\n') + 1) : '';
      const call = new RegExp(`\\b${alias[1]}\\(\`\\*\\*/checks\\.json\``, 'g');
      const body = source.slice(shebang.length).replace(alias[0], '').replace(call, '__globSync(`**/checks.json`');
      source = shebang + `import {globSync as __globSync} from ${JSON.stringify(shim)};\n` + body;
    }
    return { ...result, source };
  }
  return result;
}
