#!/usr/bin/env node
/**
 * The sidebar's API types, generated from the server's OpenAPI document.
 *
 *   node scripts/gen-api.mjs            write labextension/src/api/generated/ (`jlpm gen:api`)
 *   node scripts/gen-api.mjs --check    exit 1 when a file there is not what would be written now
 *                                       (`jlpm check:api`, run by `make test`)
 *   --spec PATH / --out DIR             another document or output folder (the check's own tests)
 *
 * The types come from openapi-typescript. This script splits its answer by the document's tags:
 * one file per tag holds that tag's paths, operations and the schemas only its operations use
 * (`shared.ts` holds the schemas several tags use), and `index.ts` joins them into the
 * `paths`, `components` and `operations` types openapi-typescript would have written in one file.
 * It writes a file only when its text changes (their age drives `make setup`).
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import openapiTS, { astToString, COMMENT_HEADER } from 'openapi-typescript';
import ts from 'typescript';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const DEFAULT_SPEC = path.join(ROOT, 'gpu_widgets', 'server', 'openapi.json');
const DEFAULT_OUT = path.join(ROOT, 'labextension', 'src', 'api', 'generated');
const SHARED = 'shared';
const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];
const BANNER_LINE = 'do not edit; `jlpm gen:api`';

function usage(message) {
  console.error(`gen-api: ${message}\nusage: node scripts/gen-api.mjs [--check] [--spec PATH] [--out DIR]`);
  process.exit(2);
}

function parseArgs(argv) {
  const args = { check: false, spec: DEFAULT_SPEC, out: DEFAULT_OUT };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--check') {
      args.check = true;
    } else if (a === '--spec' || a === '--out') {
      const value = argv[++i];
      if (!value) {
        usage(`${a} needs a path`);
      }
      args[a.slice(2)] = path.resolve(value);
    } else {
      usage(`unknown argument ${JSON.stringify(a)}`);
    }
  }
  return args;
}

/** Repository-relative, with forward slashes, so the banner is the same on every machine. */
function shown(file) {
  const rel = path.relative(ROOT, file);
  return (rel.startsWith('..') ? file : rel).split(path.sep).join('/');
}

function readSpec(specPath) {
  let text;
  try {
    text = fs.readFileSync(specPath, 'utf8');
  } catch (e) {
    usage(`cannot read the OpenAPI document ${specPath}: ${e.message}`);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    usage(`${shown(specPath)} is not JSON: ${e.message}`);
  }
}

/** Each path's tag (the first tag of its operations, which must agree) and each operation's. */
function tagsOf(spec) {
  const pathTag = new Map();
  for (const [p, item] of Object.entries(spec.paths ?? {})) {
    for (const method of METHODS) {
      const op = item?.[method];
      if (!op) {
        continue;
      }
      const tag = op.tags?.[0];
      if (typeof tag !== 'string' || !/^[a-z][a-z0-9]*$/.test(tag) || tag === SHARED || tag === 'index') {
        usage(`${method.toUpperCase()} ${p} needs a first tag that is a lower-case word (not "${SHARED}" or "index"): its types go in the file of that name`);
      }
      if (pathTag.has(p) && pathTag.get(p) !== tag) {
        usage(`the operations of ${p} have different first tags ("${pathTag.get(p)}", "${tag}"): a path's types go in one file`);
      }
      pathTag.set(p, tag);
    }
  }
  return pathTag;
}

const SCHEMA_REF = '#/components/schemas/';

/** The schemas a part of the document names with $ref, and those they name in turn. */
function refsOf(node, schemas, found = new Set()) {
  if (Array.isArray(node)) {
    node.forEach(n => refsOf(n, schemas, found));
  } else if (node && typeof node === 'object') {
    for (const [key, value] of Object.entries(node)) {
      if (key === '$ref' && typeof value === 'string' && value.startsWith(SCHEMA_REF)) {
        const name = value.slice(SCHEMA_REF.length);
        if (!found.has(name)) {
          found.add(name);
          refsOf(schemas[name], schemas, found);
        }
      } else {
        refsOf(value, schemas, found);
      }
    }
  }
  return found;
}

/** Each schema's file: the tag of the paths that use it when they are all of one tag, else shared. */
function schemaTags(spec, pathTag) {
  const schemas = spec.components?.schemas ?? {};
  const users = new Map(Object.keys(schemas).map(name => [name, new Set()]));
  for (const [p, item] of Object.entries(spec.paths ?? {})) {
    for (const name of refsOf(item, schemas)) {
      users.get(name)?.add(pathTag.get(p));
    }
  }
  return new Map([...users].map(([name, tags]) => [name, tags.size === 1 ? [...tags][0] : SHARED]));
}

const f = ts.factory;
const EXPORT = [f.createModifier(ts.SyntaxKind.ExportKeyword)];
const capital = word => word[0].toUpperCase() + word.slice(1);
const memberName = m => (m.name && (ts.isIdentifier(m.name) || ts.isStringLiteral(m.name)) ? m.name.text : undefined);

function declaration(nodes, name) {
  const found = nodes.find(n => ts.isInterfaceDeclaration(n) && n.name.text === name);
  if (!found) {
    usage(`openapi-typescript wrote no "${name}" interface: this script needs updating for its version`);
  }
  return found;
}

function banner(specPath, what) {
  return (
    COMMENT_HEADER +
    '/**\n' +
    ` * Generated by openapi-typescript from ${shown(specPath)}; ${BANNER_LINE}.\n` +
    ' * `make test` (`jlpm check:api`) fails when this file no longer matches that document.\n' +
    ` *\n * ${what}\n` +
    ' */\n'
  );
}

const intersection = names => f.createIntersectionTypeNode(names.map(n => f.createTypeReferenceNode(n)));

/** {file name: text}: one file per tag, shared.ts, and index.ts that joins them. */
async function generate(specPath) {
  const spec = readSpec(specPath);
  const pathTag = tagsOf(spec);
  const schemaTag = schemaTags(spec, pathTag);
  const nodes = await openapiTS(spec);
  const paths = declaration(nodes, 'paths');
  const operations = declaration(nodes, 'operations');
  const components = declaration(nodes, 'components');
  const schemas = components.members.find(m => memberName(m) === 'schemas');
  const schemaMembers = schemas?.type && ts.isTypeLiteralNode(schemas.type) ? schemas.type.members : [];

  const operationTag = new Map();
  for (const m of paths.members) {
    for (const op of m.type?.members ?? []) {
      const ref = op.type && ts.isIndexedAccessTypeNode(op.type) && op.type.indexType;
      if (ref && ts.isLiteralTypeNode(ref) && ts.isStringLiteral(ref.literal)) {
        operationTag.set(ref.literal.text, pathTag.get(memberName(m)));
      }
    }
  }
  const described = new Map((spec.tags ?? []).map(t => [t.name, t.description]));
  // The document's own order of tags first; a tag no route has gets no file
  const used = new Set(pathTag.values());
  const order = [...new Set([...described.keys(), ...used])].filter(t => used.has(t));
  const kinds = [
    ['Paths', paths.members, m => pathTag.get(memberName(m))],
    ['Operations', operations.members, m => operationTag.get(memberName(m)) ?? SHARED],
    ['Schemas', schemaMembers, m => schemaTag.get(memberName(m)) ?? SHARED]
  ];

  const files = {};
  const joined = { Paths: [], Operations: [], Schemas: [] };
  for (const tag of [...order, SHARED]) {
    const parts = [];
    for (const [kind, members, tagOf] of kinds) {
      const mine = members.filter(m => tagOf(m) === tag);
      if (mine.length) {
        parts.push(f.createInterfaceDeclaration(EXPORT, `${capital(tag)}${kind}`, undefined, undefined, mine));
        joined[kind].push([`${capital(tag)}${kind}`, tag]);
      }
    }
    if (!parts.length) {
      continue;
    }
    const body = astToString(parts);
    const referenced = ['components', 'operations'].filter(name => new RegExp(`\\b${name}\\[`).test(body));
    const what =
      tag === SHARED
        ? 'The schemas that the operations of several tags use.'
        : `The "${tag}" tag${described.get(tag) ? `: ${described.get(tag)}` : ''}.`;
    files[`${tag}.ts`] =
      banner(specPath, what) + '\n' + (referenced.length ? `import type { ${referenced.join(', ')} } from './index';\n\n` : '') + body;
  }

  const byFile = new Map();
  for (const [name, tag] of Object.values(joined).flat()) {
    byFile.set(tag, [...(byFile.get(tag) ?? []), name]);
  }
  const imports = [...byFile].map(([tag, names]) => `import type { ${names.join(', ')} } from './${tag}';\n`).join('');
  const alias = (name, kind, original) =>
    joined[kind].length ? f.createTypeAliasDeclaration(EXPORT, name, undefined, intersection(joined[kind].map(([n]) => n))) : original;
  const index = nodes.map(n => {
    if (n === paths) {
      return alias('paths', 'Paths', n);
    }
    if (n === operations) {
      return alias('operations', 'Operations', n);
    }
    if (n === components && joined.Schemas.length) {
      const members = components.members.map(m =>
        m === schemas ? f.createPropertySignature(undefined, 'schemas', undefined, intersection(joined.Schemas.map(([x]) => x))) : m
      );
      return f.createInterfaceDeclaration(EXPORT, 'components', undefined, undefined, members);
    }
    return n;
  });
  files['index.ts'] =
    banner(specPath, "The whole API's types, joined from the file of each tag (as openapi-typescript writes them in one).") +
    '\n' + imports + '\n' + astToString(index);
  return files;
}

/** The 1-based number of the first line where two texts differ. */
function firstDifference(a, b) {
  const x = a.split('\n');
  const y = b.split('\n');
  let i = 0;
  while (i < x.length && i < y.length && x[i] === y[i]) {
    i++;
  }
  return i + 1;
}

/** The files in `dir` this script wrote (its banner), whether or not they are still wanted. */
function ours(dir) {
  if (!fs.existsSync(dir)) {
    return [];
  }
  return fs.readdirSync(dir).filter(name => name.endsWith('.ts') && fs.readFileSync(path.join(dir, name), 'utf8').includes(BANNER_LINE));
}

const args = parseArgs(process.argv.slice(2));
const wanted = await generate(args.spec);
const present = ours(args.out);
const current = name => {
  const file = path.join(args.out, name);
  return fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : null;
};

if (args.check) {
  const problems = [];
  for (const [name, text] of Object.entries(wanted)) {
    const now = current(name);
    if (now !== text) {
      const why = now === null ? 'is missing' : `is stale (first difference at line ${firstDifference(now, text)})`;
      problems.push(`${shown(path.join(args.out, name))} ${why}`);
    }
  }
  for (const name of present.filter(n => !(n in wanted))) {
    problems.push(`${shown(path.join(args.out, name))} is no longer generated`);
  }
  if (!problems.length) {
    console.log(`gen-api: ${shown(args.out)} matches ${shown(args.spec)}`);
    process.exit(0);
  }
  console.error(
    `gen-api: ${problems.join('; ')}: ${shown(args.spec)} changed since they were generated.\n` +
      'Run `jlpm gen:api` and commit the result.'
  );
  process.exit(1);
}

fs.mkdirSync(args.out, { recursive: true });
const written = [];
for (const [name, text] of Object.entries(wanted)) {
  if (current(name) !== text) {
    fs.writeFileSync(path.join(args.out, name), text);
    written.push(name);
  }
}
for (const name of present.filter(n => !(n in wanted))) {
  fs.rmSync(path.join(args.out, name));
  written.push(`${name} (removed)`);
}
console.log(
  written.length
    ? `gen-api: wrote ${written.join(', ')} in ${shown(args.out)} from ${shown(args.spec)}`
    : `gen-api: ${shown(args.out)} is up to date`
);
