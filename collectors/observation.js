(args) => {
  const ATTR = 'data-dw-id';
  const SKIP_IDS = {'reward-display':1, 'sync-task-cover':1, 'click-canvas':1, 'query':1};
  const SKIP_TAGS = {SCRIPT:1, STYLE:1, NOSCRIPT:1, TEMPLATE:1, HEAD:1, META:1, LINK:1, TITLE:1, BR:1, HR:1, IFRAME:0};
  const INTERACTIVE = {button:1, link:1, textbox:1, searchbox:1, checkbox:1, radio:1, slider:1,
    spinbutton:1, combobox:1, listbox:1, option:1, tab:1, menuitem:1, menuitemcheckbox:1,
    menuitemradio:1, treeitem:1, 'switch':1, gridcell:1};
  const LEAF = {textbox:1, searchbox:1, checkbox:1, radio:1, slider:1, spinbutton:1, img:1, canvas:1, svg:1, 'switch':1};
  const NAME_FROM_CONTENT = {button:1, link:1, tab:1, menuitem:1, menuitemcheckbox:1, menuitemradio:1,
    option:1, treeitem:1, heading:1, cell:1, columnheader:1, gridcell:1, label:1, listitem:1,
    text:1, tooltip:1, status:1};
  const KEEP_CONTAINER = {dialog:1, alertdialog:1, tabpanel:1, tablist:1, menu:1, menubar:1, tree:1,
    group:1, row:1, svg:1, form:0, radiogroup:1, listbox:1, grid:1, region:0, tooltip:1, alert:1, status:0};
  const TEXT_TYPES = {text:1, search:1, email:1, url:1, tel:1, '':1};
  const norm = (s) => (s || '').replace(/\s+/g, ' ').trim();
  const jq = (window.jQuery && window.jQuery._data) ? window.jQuery : null;
  // Boxes: 'x,y,w,h' in viewport CSS pixels, rounded, for SVG/canvas elements, the
  // shapes inside an SVG and draggable elements: what click_at / drag positions are taken from.
  const SVG_SKIP = {defs:1, style:1, title:1, desc:1, clippath:1, mask:1, marker:1, lineargradient:1,
    radialgradient:1, pattern:1, filter:1, symbol:1, metadata:1, script:1};
  const ICON_PX = 24;
  function boxOf(el) {
    const r = el.getBoundingClientRect();
    return [Math.round(r.left), Math.round(r.top), Math.round(r.width), Math.round(r.height)].join(',');
  }
  function isDraggable(el) {
    if (el.getAttribute('draggable') === 'true') return true;
    if (el['__onmousedown.drag'] || el['__ontouchstart.drag']) return true;    // d3 v3 drag behaviour
    const c = el.classList;
    if (c && (c.contains('ui-draggable') || c.contains('ui-sortable-handle'))) return true;
    const p = el.parentElement;
    return !!(p && p.classList && p.classList.contains('ui-sortable'));
  }
  // the shapes of an SVG, in document order (groups flattened): one node each, with its box
  function svgKids(svg) {
    const out = [];
    for (const c of svg.children) {
      const t = c.tagName.toLowerCase();
      if (SVG_SKIP[t]) continue;
      const cs = getComputedStyle(c);
      if (cs.display === 'none' || cs.visibility === 'hidden') continue;
      if (t === 'g' || t === 'a' || t === 'svg') { for (const k of svgKids(c)) out.push(k); continue; }
      const r = c.getBoundingClientRect();
      if (r.width < 2 && r.height < 2) continue;   // nothing drawn yet, or a chart's dot
      const name = (t === 'text' || t === 'tspan') ? norm(c.textContent) : norm(c.getAttribute('aria-label') || '');
      out.push({el: c, role: t, name, props: [['box', boxOf(c)]], kids: [], act: true});
    }
    return out;
  }

  function hasHandler(el) {
    if (el.onclick || el.onmousedown || el.onmouseup || el.ondblclick) return true;
    if (el.__onclick || el.__onmousedown || el.__onmouseup) return true;            // d3 v3
    if (el.__on) { for (const o of el.__on) if (/^(click|mouse(down|up)|dblclick)/.test(o.type)) return true; } // d3 v4
    if (jq) { const ev = jq._data(el, 'events'); if (ev && (ev.click || ev.mousedown || ev.mouseup || ev.dblclick)) return true; }
    return false;
  }

  function roleOf(el, tag) {
    const r = el.getAttribute('role');
    if (r) {
      const rr = r.split(' ')[0].toLowerCase();
      if (rr !== 'presentation' && rr !== 'none') return rr;   // those mean: the tag's own role
    }
    switch (tag) {
      case 'A': return 'link';
      case 'BUTTON': return 'button';
      case 'INPUT': {
        const t = (el.getAttribute('type') || 'text').toLowerCase();
        if (t === 'button' || t === 'submit' || t === 'reset' || t === 'image') return 'button';
        if (t === 'checkbox') return 'checkbox';
        if (t === 'radio') return 'radio';
        if (t === 'range') return 'slider';
        if (t === 'hidden') return null;
        if (t === 'number') return 'spinbutton';
        return 'textbox';
      }
      case 'TEXTAREA': return 'textbox';
      case 'SELECT': return (el.multiple || el.size > 1) ? 'listbox' : 'combobox';
      case 'OPTION': return 'option';
      case 'H1': case 'H2': case 'H3': case 'H4': case 'H5': case 'H6': return 'heading';
      case 'IMG': return 'img';
      case 'LABEL': return 'label';
      case 'LI': return 'listitem';
      case 'TD': return 'cell';
      case 'TH': return 'columnheader';
      case 'TR': return 'row';
      case 'CANVAS': return 'canvas';
      case 'SVG': return 'svg';
    }
    if (el.isContentEditable && el.hasAttribute('contenteditable')) return 'textbox';
    return '';
  }

  function controlName(el) {
    let n = el.getAttribute('aria-label');
    if (n) return norm(n);
    if (el.labels && el.labels.length) {
      const parts = [];
      for (const l of el.labels) parts.push(norm(l.innerText));
      n = norm(parts.join(' '));
      if (n) return n;
    }
    return norm(el.getAttribute('placeholder') || el.getAttribute('title') || '');
  }

  function textNode(s) { return {el: null, role: 'text', name: s, props: [], kids: [], act: false}; }
  const allText = (kids) => kids.length > 0 && kids.every(k => k.role === 'text' && !k.act && !k.kids.length);

  function walk(el, parentCursor) {
    const tag = el.tagName.toUpperCase();
    if (SKIP_TAGS[tag]) return [];
    if (el.id && SKIP_IDS[el.id]) return [];
    const cs = getComputedStyle(el);
    if (cs.display === 'none') return [];
    const hidden = cs.visibility === 'hidden' || cs.visibility === 'collapse';
    if (cs.overflow === 'hidden' && cs.position === 'absolute') {
      const r = el.getBoundingClientRect();
      if (r.width <= 1 || r.height <= 1) return [];   // visually-hidden helpers (jQuery UI live regions)
    }
    let role = roleOf(el, tag);
    if (role === null) return [];
    const props = [];
    let name = '';
    let kids = [];
    if (tag === 'SELECT') {
      for (const o of el.options) {
        const on = {el: null, role: 'option', name: norm(o.text), props: o.selected ? [['selected', null]] : [], kids: [], act: false};
        kids.push(on);
      }
      const sel = el.options[el.selectedIndex];
      if (sel) props.push(['value', norm(sel.text)]);
      name = controlName(el);
    } else if (role === 'svg') {
      name = norm(el.getAttribute('aria-label') || '');
      const r = el.getBoundingClientRect();
      if (r.width > ICON_PX || r.height > ICON_PX) kids = svgKids(el);   // an icon: one line

    } else if (LEAF[role]) {
      if (tag === 'INPUT' || tag === 'TEXTAREA') {
        name = controlName(el);
        const t = (el.getAttribute('type') || 'text').toLowerCase();
        if (role === 'checkbox' || role === 'radio') { if (el.checked) props.push(['checked', null]); }
        else if (el.value) props.push(['value', el.value]);
        if (role === 'textbox' && tag === 'INPUT' && !TEXT_TYPES[t]) props.push(['type', t]);
        if (tag === 'TEXTAREA') props.push(['multiline', null]);
        if (role === 'slider') { props.push(['min', el.min || '0']); props.push(['max', el.max || '100']); }
      } else if (role === 'img') {
        name = norm(el.getAttribute('alt') || el.getAttribute('aria-label') || el.getAttribute('title') || '');
      } else if (role === 'textbox') {   // contenteditable
        name = norm(el.getAttribute('aria-label') || '');
        const v = norm(el.innerText); if (v) props.push(['value', v]);
      } else {
        name = norm(el.getAttribute('aria-label') || '');
        if (role === 'checkbox' || role === 'radio' || role === 'switch') {
          if (el.getAttribute('aria-checked') === 'true') props.push(['checked', null]);
        }
      }
    } else {
      const cur = cs.cursor;
      for (const c of el.childNodes) {
        if (c.nodeType === 3) {
          const t = norm(c.data);
          if (t && !hidden) kids.push(textNode(t));
        } else if (c.nodeType === 1) {
          const sub = walk(c, cur);
          for (const s of sub) kids.push(s);
        }
      }
    }
    if (hidden) return kids;
    const tabbable = el.hasAttribute('tabindex') && el.tabIndex >= 0;
    const click = !INTERACTIVE[role] && (hasHandler(el) || (cs.cursor === 'pointer' && parentCursor !== 'pointer'));
    if (el.disabled || el.getAttribute('aria-disabled') === 'true') props.push(['disabled', null]);
    const ex = el.getAttribute('aria-expanded');
    if (ex === 'true') props.push(['expanded', null]); else if (ex === 'false') props.push(['collapsed', null]);
    if (el.getAttribute('aria-selected') === 'true' && role !== 'option') props.push(['selected', null]);
    const hp = el.getAttribute('aria-haspopup');
    if (hp && hp !== 'false') props.push(['haspopup', null]);
    if (role === 'option' && (el.getAttribute('aria-selected') === 'true')) props.push(['selected', null]);
    if ((role === 'checkbox' || role === 'radio' || role === 'menuitemcheckbox') && tag !== 'INPUT' && el.getAttribute('aria-checked') === 'true' && !props.some(p => p[0] === 'checked')) props.push(['checked', null]);

    // <label> wrapping exactly one control: the control takes the label's text as its name
    if (role === 'label') {
      const ctrls = kids.filter(k => k.act || INTERACTIVE[k.role]);
      const others = kids.filter(k => !(k.act || INTERACTIVE[k.role]));
      if (ctrls.length === 1 && others.every(k => k.role === 'text' && !k.kids.length)) {
        const c = ctrls[0];
        const t = norm(others.map(k => k.name).join(' '));
        if (!c.name) c.name = t;
        return [c];
      }
      if (!kids.length) return [];
    }
    if (!role) {
      if (!kids.length) {
        if (!click && !tabbable) return [];
        role = 'generic';
        name = norm(el.getAttribute('aria-label') || el.getAttribute('title') || '');
      } else if (allText(kids) && kids.filter(k => k.el && k.el.tagName === 'P').length < 2) {
        role = 'text';
      } else if (!click && !tabbable) {
        return kids;                                        // a plain container: flatten
      } else {
        role = 'generic';
      }
    } else if ((role === 'list' || role === 'table' || role === 'rowgroup' || role === 'presentation' || role === 'none' || role === 'form') && !click) {
      return kids;
    }
    if (NAME_FROM_CONTENT[role] || role === 'generic') {
      if (allText(kids)) { if (!name) name = norm(kids.map(k => k.name).join(' ')); kids = []; }
      else if (!name) {
        // a leading run of loose text names the node (e.g. "<li>Folder <ul>...</ul></li>")
        let i = 0; const parts = [];
        while (i < kids.length && kids[i].role === 'text' && !kids[i].el && !kids[i].kids.length) { parts.push(kids[i].name); i++; }
        if (parts.length) { name = norm(parts.join(' ')); kids = kids.slice(i); }
      }
    }
    if (!name && (click || tabbable) && (role === 'generic' || role === 'listitem') && kids.length) {
      // a clickable item (an email row, a menu entry) is named by its own loose/plain text lines
      const own = kids.filter(k => k.role === 'text' && !k.act && !k.kids.length);
      if (own.length && own.length < kids.length) { name = norm(own.map(k => k.name).join(' ')); kids = kids.filter(k => own.indexOf(k) < 0); }
    }
    if (!name && (role === 'button' || role === 'link')) name = norm(el.getAttribute('aria-label') || el.getAttribute('title') || el.value || '');
    if (!name && !kids.length && !INTERACTIVE[role] && !click && !tabbable && role !== 'img' && role !== 'canvas' && role !== 'svg' && role !== 'generic') return [];
    if (click) props.push(['clickable', null]);
    const drag = isDraggable(el);
    if (drag || role === 'svg' || role === 'canvas') props.push(['box', boxOf(el)]);
    const act = !!(INTERACTIVE[role] || click || tabbable || drag || role === 'label' || role === 'canvas' || role === 'svg');
    if (role === 'generic' && !name) {
      // a nameless widget (an icon): its DOM id / classes are the only hint of what it is
      if (el.id) props.push(['id', el.id]);
      const cls = (typeof el.className === 'string' ? el.className : '').trim().split(/\s+/).filter(Boolean).slice(0, 3).join(' ');
      if (cls) props.push(['class', cls]);
    }
    const node = {el, role, name, props, kids, act};
    // a nameless node around exactly one element: one line (e.g. <li role=tab><a>Tab 1</a></li>)
    if (!name && kids.length === 1 && kids[0].el && !KEEP_CONTAINER[role] && role !== 'label') return [merge(node, kids[0])];
    return [node];
  }

  const WEAK = {'': 1, text: 1, generic: 1, link: 1, listitem: 1, cell: 1, row: 0};
  function merge(outer, inner) {
    const role = (WEAK[inner.role] && !WEAK[outer.role]) ? outer.role : inner.role;
    const el = (!inner.act && outer.act) ? outer.el : inner.el;
    const props = [];
    const seen = {};
    const innerGenericHints = role !== 'generic';
    for (const p of inner.props.concat(outer.props)) {
      if (seen[p[0]]) continue;
      if ((p[0] === 'class' || p[0] === 'id') && innerGenericHints) continue;
      if (p[0] === 'clickable' && INTERACTIVE[role]) continue;
      seen[p[0]] = 1; props.push(p);
    }
    return {el, role, name: inner.name, props, kids: inner.kids, act: !!(outer.act || inner.act)};
  }

  let next = args.nextId | 0;
  if (args.reset) {
    for (const e of document.querySelectorAll('[' + ATTR + ']')) e.removeAttribute(ATTR);
    next = 1;
  }
  const roots = walk(document.body, 'auto');
  const out = [];
  const seen = new Set();
  const elIds = new Map();
  function emit(n, depth) {
    let id = null;
    if (n.el) {
      const a = n.el.getAttribute(ATTR);
      let v = a === null ? NaN : parseInt(a, 10);
      if (!(v > 0) || seen.has(v)) { v = next++; n.el.setAttribute(ATTR, String(v)); }
      else if (v >= next) next = v + 1;
      seen.add(v); id = v; elIds.set(n.el, v);
    }
    out.push([depth, id, n.role, n.name, n.props, n.act ? 1 : 0]);
    for (const k of n.kids) emit(k, depth + 1);
  }
  for (const r of roots) emit(r, 0);
  let focused = null;
  let a = document.activeElement;
  while (a && a !== document.body && a !== document.documentElement) {
    if (elIds.has(a)) { focused = elIds.get(a); break; }
    a = a.parentElement;
  }
  const hasCore = typeof core !== 'undefined' && core && typeof core.getUtterance === 'function';
  let instruction = '';
  try { instruction = hasCore ? core.getUtterance() : norm(document.title); } catch (e) {}
  // one JSON string: Playwright's value serializer (and the Python side's parser) cost several
  // times more than JSON.stringify / json.loads for this nested list
  return JSON.stringify({
    lines: out, next: next, focused: focused, instruction: instruction, url: location.href,
    done: typeof WOB_DONE_GLOBAL !== 'undefined' ? !!WOB_DONE_GLOBAL : false,
    raw_reward: typeof WOB_RAW_REWARD_GLOBAL !== 'undefined' ? +WOB_RAW_REWARD_GLOBAL : 0,
    reward: typeof WOB_REWARD_GLOBAL !== 'undefined' ? +WOB_REWARD_GLOBAL : 0,
    reason: typeof WOB_REWARD_REASON !== 'undefined' && WOB_REWARD_REASON !== null ? String(WOB_REWARD_REASON) : null,
    ready: typeof WOB_TASK_READY !== 'undefined' ? !!WOB_TASK_READY : true,
    wob_episode: typeof WOB_EPISODE_ID !== 'undefined' ? WOB_EPISODE_ID : null,
    settled_ms: args.settled === undefined ? null : args.settled,
  });
}
