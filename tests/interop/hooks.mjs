const shim = new URL('./glob-shim.mjs', import.meta.url).href;
export async function load(url, context, nextLoad) {
  const result = await nextLoad(url, context);
  if (url.includes('@modelcontextprotocol/conformance/dist/') && result.source) {
    let source = String(result.source);
    if (source.includes('globSync as o,')) {
      const shebang = source.startsWith('#!') ? source.slice(0, source.indexOf('\n') + 1) : '';
      const body = source.slice(shebang.length).replace('globSync as o,', '').replace(/\bo\(`\*\*\/checks\.json`/g, '__globSync(`**/checks.json`');
      source = shebang + `import {globSync as __globSync} from ${JSON.stringify(shim)};\n` + body;
    }
    return { ...result, source };
  }
  return result;
}
