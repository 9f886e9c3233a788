// Node 20 lacks fs.globSync, which the conformance package imports; this supplies the
// one pattern shape it uses (`**/<file>` under a cwd).
import fs from 'node:fs';
import path from 'node:path';
export function globSync(pattern, options = {}) {
  const cwd = options.cwd ?? process.cwd();
  const base = pattern.replace(/^\*\*\//, '');
  const out = [];
  const walk = (dir) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (entry.name === base) out.push(path.relative(cwd, full));
    }
  };
  if (fs.existsSync(cwd)) walk(cwd);
  return out;
}
