// Part of the inspector's one script (see mod.rs): forms built from JSON Schema, for params and for questions.

// ----- forms from JSON Schema --------------------------------------------------------

let fieldCounter = 0;
const PRIMITIVES = ['string', 'number', 'integer', 'boolean'];

const isNullSchema = (s) => s && (s.type === 'null' || (Array.isArray(s.enum) && s.enum.length === 1 && s.enum[0] === null) || s.const === null);

// Unwraps `Option<T>` shapes (`type: [T, "null"]`, `anyOf [T, null]`) and
// single `allOf`s; says whether null is allowed.
function normalize(schema) {
  let s = schema && typeof schema === 'object' ? schema : {};
  let nullable = false;
  for (let i = 0; i < 4; i += 1) {
    if (Array.isArray(s.type)) {
      const kinds = s.type.filter((t) => t !== 'null');
      if (kinds.length < s.type.length) nullable = true;
      if (kinds.length === 1) s = { ...s, type: kinds[0] };
    }
    const alts = Array.isArray(s.anyOf) ? 'anyOf' : Array.isArray(s.oneOf) ? 'oneOf' : null;
    if (alts && s[alts].length === 2 && s[alts].some(isNullSchema)) {
      const inner = s[alts].find((o) => !isNullSchema(o)) || {};
      const rest = { ...s };
      delete rest[alts];
      s = { ...inner, ...rest };
      nullable = true;
      continue;
    }
    if (Array.isArray(s.allOf) && s.allOf.length === 1) {
      const rest = { ...s };
      delete rest.allOf;
      s = { ...s.allOf[0], ...rest };
      continue;
    }
    break;
  }
  return { s, nullable };
}

// The choices of an enum: `enum`, or `oneOf`/`anyOf` of constants (a
// documented Rust enum), or a lone `const`.
function choicesOf(s) {
  if (Array.isArray(s.enum)) return s.enum.filter((v) => v !== null).map((v) => ({ value: v }));
  const alts = s.oneOf || s.anyOf;
  if (Array.isArray(alts) && alts.length && alts.every((a) => a && typeof a === 'object'
      && ('const' in a || (Array.isArray(a.enum) && a.enum.length === 1)))) {
    return alts.map((a) => ({ value: 'const' in a ? a.const : a.enum[0], help: a.description || a.title }));
  }
  if ('const' in s) return [{ value: s.const }];
  return null;
}

function kindOf(s) {
  if (choicesOf(s)) return 'enum';
  if (PRIMITIVES.includes(s.type)) return s.type;
  if (s.type === 'array') {
    const items = normalize(s.items).s;
    if (choicesOf(items)) return 'multi';
    if (PRIMITIVES.includes(items.type)) return 'list';
    return 'json';
  }
  if ((s.type === 'object' || s.type === undefined) && s.properties && typeof s.properties === 'object') return 'object';
  return 'json';
}

function hintsOf(s) {
  const h = [];
  if (s.minLength !== undefined && s.maxLength !== undefined) h.push(`${s.minLength}–${s.maxLength} characters`);
  else if (s.minLength !== undefined) h.push(`at least ${s.minLength} characters`);
  else if (s.maxLength !== undefined) h.push(`at most ${s.maxLength} characters`);
  if (s.pattern) h.push(`pattern ${s.pattern}`);
  if (s.format && s.type === 'string') h.push(`format ${s.format}`);
  if (s.minimum !== undefined) h.push(`≥ ${s.minimum}`);
  if (s.exclusiveMinimum !== undefined) h.push(`> ${s.exclusiveMinimum}`);
  if (s.maximum !== undefined) h.push(`≤ ${s.maximum}`);
  if (s.exclusiveMaximum !== undefined) h.push(`< ${s.exclusiveMaximum}`);
  if (s.multipleOf !== undefined) h.push(`multiple of ${s.multipleOf}`);
  if (s.minItems !== undefined) h.push(`at least ${s.minItems} items`);
  if (s.maxItems !== undefined) h.push(`at most ${s.maxItems} items`);
  return h.join(' · ');
}

const choiceLabel = (c) => (typeof c.value === 'string' ? c.value : JSON.stringify(c.value)) + (c.help ? ` — ${c.help}` : '');

// One input for a primitive value; `get()` says {value} or {absent} or {error}.
function primitiveInput(kind, s, id, initial, required, nullable) {
  if (kind === 'boolean') {
    const input = el('input', { type: 'checkbox', id });
    input.checked = initial === true;
    let touched = initial !== undefined;
    input.addEventListener('change', () => { touched = true; });
    return {
      input,
      get: () => (touched || required ? { value: input.checked } : { absent: true }),
    };
  }
  if (kind === 'enum') {
    const choices = choicesOf(s);
    const input = el('select', { id });
    const offset = required && !nullable ? 0 : 1;
    if (offset) input.append(el('option', { value: '', text: nullable && required ? '— null —' : '— not set —' }));
    choices.forEach((c) => input.append(el('option', { value: typeof c.value === 'string' ? c.value : JSON.stringify(c.value), text: choiceLabel(c) })));
    const at = choices.findIndex((c) => JSON.stringify(c.value) === JSON.stringify(initial));
    input.selectedIndex = at >= 0 ? at + offset : 0;
    return {
      input,
      get: () => {
        const i = input.selectedIndex - offset;
        if (i < 0) return nullable && required ? { value: null } : { absent: true };
        return { value: choices[i].value };
      },
    };
  }
  if (kind === 'number' || kind === 'integer') {
    const input = el('input', { type: 'number', id, step: kind === 'integer' ? '1' : 'any',
      min: s.minimum, max: s.maximum, inputmode: kind === 'integer' ? 'numeric' : 'decimal' });
    if (typeof initial === 'number') input.value = String(initial);
    return {
      input,
      get: () => {
        if (input.validity.badInput) return { error: 'not a number' };
        if (input.value.trim() === '') return nullable && required ? { value: null } : { absent: true };
        return { value: Number(input.value) };
      },
    };
  }
  // string (and anything shown as text)
  const type = s.format === 'email' ? 'email' : s.format === 'uri' ? 'url' : 'text';
  const input = el('input', { type, id, minlength: s.minLength, maxlength: s.maxLength,
    pattern: s.pattern, spellcheck: 'false' });
  if (typeof initial === 'string') input.value = initial;
  return {
    input,
    get: () => {
      if (input.value === '' && !required) return { absent: true };
      if (input.value === '' && nullable) return { value: null };
      return { value: input.value };
    },
  };
}

// A field for property `name` at JSON pointer `path`; returns
// {element, get()} where get() gives {value} | {absent} and records
// local mistakes through `errors`.
function buildField(schema, path, name, required, errors) {
  const { s, nullable } = normalize(schema);
  const kind = kindOf(s);
  const id = `f${++fieldCounter}`;
  const initial = s.default;
  const title = s.title && s.title !== name ? `${name} (${s.title})` : name;
  const typeText = kind === 'enum' ? 'choice' : kind === 'list' || kind === 'multi' ? 'list' : kind === 'json' ? 'JSON' : kind;
  const attrs = { class: 'field', 'data-path': path, 'data-kind': kind, 'data-required': required ? 'true' : null };
  const help = s.description ? el('div', { class: 'help', text: s.description }) : null;
  const hints = hintsOf(s) ? el('div', { class: 'hint', text: hintsOf(s) }) : null;
  const errorBox = el('div', { class: 'field-error', 'data-error-for': path, hidden: true });
  const label = (forId) => el('label', { for: forId },
    title, required ? el('span', { class: 'req', title: 'required', text: '*' }) : null,
    el('span', { class: 'type', text: typeText }));

  if (kind === 'object') {
    const fieldset = el('fieldset', attrs, el('legend', {}, title,
      required ? el('span', { class: 'req', title: 'required', text: '*' }) : null));
    if (help) fieldset.append(help);
    const children = objectFields(s, path, fieldset, errors);
    fieldset.append(errorBox);
    return {
      element: fieldset,
      get: () => {
        const value = collectObject(children);
        if (Object.keys(value).length === 0 && !required) return { absent: true };
        return { value };
      },
    };
  }

  const wrap = el('div', attrs);
  if (kind === 'multi') {
    const items = normalize(s.items).s;
    const choices = choicesOf(items);
    const picked = Array.isArray(initial) ? initial.map((v) => JSON.stringify(v)) : [];
    const boxes = choices.map((c, i) => {
      const box = el('input', { type: 'checkbox', id: `${id}-${i}`, 'data-index': i });
      box.checked = picked.includes(JSON.stringify(c.value));
      return box;
    });
    wrap.append(el('div', { class: 'label' }, title, required ? el('span', { class: 'req', text: '*' }) : null,
      el('span', { class: 'type', text: 'choices' })));
    choices.forEach((c, i) => wrap.append(el('label', { class: 'check', for: boxes[i].id }, boxes[i], choiceLabel(c))));
    for (const extra of [hints, help, errorBox]) if (extra) wrap.append(extra);
    return {
      element: wrap,
      get: () => {
        const value = choices.filter((_, i) => boxes[i].checked).map((c) => c.value);
        return value.length || required ? { value } : { absent: true };
      },
    };
  }

  if (kind === 'list') {
    const items = normalize(s.items).s;
    const itemKind = kindOf(items);
    const rows = el('div', { class: 'list' });
    const inputs = [];
    const addRow = (value) => {
      const made = primitiveInput(itemKind, items, `${id}-${inputs.length}`, value, true, false);
      const row = el('div', { class: 'row' }, made.input);
      const remove = el('button', { type: 'button', class: 'small', 'data-action': 'remove-item', title: 'remove', text: '×' });
      remove.addEventListener('click', () => {
        row.remove();
        inputs.splice(inputs.indexOf(made), 1);
      });
      row.append(remove);
      rows.append(row);
      inputs.push(made);
      return made;
    };
    (Array.isArray(initial) ? initial : []).forEach((v) => addRow(v));
    const add = el('button', { type: 'button', class: 'small', 'data-action': 'add-item', text: '+ add item' });
    add.addEventListener('click', () => addRow(undefined).input.focus());
    wrap.append(label(`${id}-0`), rows, add);
    for (const extra of [hints, help, errorBox]) if (extra) wrap.append(extra);
    return {
      element: wrap,
      get: () => {
        const value = [];
        for (const [i, made] of inputs.entries()) {
          const got = made.get();
          if (got.error) errors.push({ path: `${path}/${i}`, message: got.error });
          else if (!got.absent) value.push(got.value);
        }
        return value.length || required ? { value } : { absent: true };
      },
    };
  }

  if (kind === 'json') {
    const area = el('textarea', { id, spellcheck: 'false', placeholder: 'JSON' });
    if (initial !== undefined) area.value = pretty(initial);
    wrap.append(label(id), area);
    const schemaNote = el('div', { class: 'hint', text: `any JSON matching: ${JSON.stringify(s).slice(0, 200)}` });
    for (const extra of [hints, help, schemaNote, errorBox]) if (extra) wrap.append(extra);
    return {
      element: wrap,
      get: () => {
        if (area.value.trim() === '') return { absent: true };
        try {
          return { value: JSON.parse(area.value) };
        } catch (e) {
          errors.push({ path, message: `not valid JSON: ${e.message}` });
          return { absent: true };
        }
      },
    };
  }

  const made = primitiveInput(kind, s, id, initial, required, nullable);
  if (kind === 'boolean') {
    wrap.append(el('label', { class: 'check', for: id }, made.input, title,
      required ? el('span', { class: 'req', text: '*' }) : null, el('span', { class: 'type', text: 'boolean' })));
  } else {
    wrap.append(label(id), made.input);
  }
  for (const extra of [hints, help, errorBox]) if (extra) wrap.append(extra);
  return {
    element: wrap,
    get: () => {
      const got = made.get();
      if (got.error) {
        errors.push({ path, message: got.error });
        return { absent: true };
      }
      return got;
    },
  };
}

function objectFields(s, path, parent, errors) {
  const required = Array.isArray(s.required) ? s.required : [];
  const children = [];
  for (const [name, prop] of Object.entries(s.properties || {})) {
    const child = buildField(prop, `${path}/${pointerEscape(name)}`, name, required.includes(name), errors);
    parent.append(child.element);
    children.push({ name, child });
  }
  return children;
}

function collectObject(children) {
  const value = {};
  for (const { name, child } of children) {
    const got = child.get();
    if (!got.absent) value[name] = got.value;
  }
  return value;
}

// A form for an object schema: {element, collect(), showErrors(details), clearErrors()}.
function buildForm(schema) {
  const errors = [];
  const { s } = normalize(schema);
  const element = el('div', { class: 'form' });
  const general = el('div', { class: 'form-error', 'data-error-for': '', hidden: true });
  element.append(general);
  let children = [];
  let whole = null;
  if (kindOf(s) === 'object' || (s.type === 'object' && !s.properties)) {
    children = objectFields(s, '', element, errors);
    if (!children.length) element.append(el('p', { class: 'muted', text: 'This tool takes no parameters.' }));
  } else {
    whole = buildField(s, '', 'params', true, errors);
    element.append(whole.element);
  }
  const form = {
    element,
    collect: () => {
      errors.length = 0;
      const value = whole ? whole.get().value : collectObject(children);
      return { value, errors: [...errors] };
    },
    clearErrors: () => {
      for (const box of element.querySelectorAll('.field-error, .form-error')) {
        box.textContent = '';
        box.hidden = true;
      }
      for (const f of element.querySelectorAll('.field.invalid')) f.classList.remove('invalid');
    },
    // Puts each {path, message} under the field it points at (the nearest
    // enclosing one for a path inside a list or an unknown member).
    showErrors: (details) => {
      for (const d of details) {
        const path = typeof d.path === 'string' ? d.path : '';
        let target = null;
        for (let p = path; ; p = p.slice(0, p.lastIndexOf('/'))) {
          target = Array.from(element.querySelectorAll('.field')).find((f) => f.dataset.path === p) || null;
          if (target || !p) break;
        }
        const box = target ? target.querySelector(`:scope > .field-error`) : general;
        const text = target && target.dataset.path === path ? d.message : `${path || '(params)'}: ${d.message}`;
        box.textContent = box.textContent ? `${box.textContent}\n${text}` : text;
        box.hidden = false;
        if (target) target.classList.add('invalid');
      }
    },
  };
  return form;
}
