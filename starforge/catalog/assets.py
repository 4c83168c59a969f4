"""The catalogue's one style sheet and one small script, inlined in every page, and the
Content-Security-Policy that allows exactly them.

Both are inlined (never a separate file) so a page opened straight from the file system
works as one served by a web server: browsers treat every ``file://`` page as an origin of
its own. The policy names them by their sha256 and allows nothing else: no other script or
style, no image, font, frame, connection or form target, from anywhere.

Laptop side.
"""

from __future__ import annotations

import base64
import hashlib

STYLE = """
:root{color-scheme:light dark;--bg:#fbfbfa;--fg:#1d1f23;--muted:#5d6470;--line:#d9dce1;--card:#fff;
--accent:#1f5fbf;--bad:#b3261e;--bad-bg:#fdecea;--ok:#1e6b37;--warn:#8a5a00;--warn-bg:#fff4d6;--code:#f1f2f4}
@media (prefers-color-scheme:dark){:root{--bg:#15171b;--fg:#e6e8eb;--muted:#9aa3ad;--line:#2d3239;--card:#1c1f24;
--accent:#7fb0ff;--bad:#ff8a80;--bad-bg:#3a1c1a;--ok:#7ad19a;--warn:#f2c463;--warn-bg:#3a2f14;--code:#262a30}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
main,header.top,footer{max-width:1100px;margin:0 auto;padding:0 16px}
header.top{padding-top:20px}
header.top p{margin:.2em 0;color:var(--muted)}
h1{font-size:1.6em;margin:.2em 0;overflow-wrap:anywhere}
h2{font-size:1.25em;margin:0 0 .4em;overflow-wrap:anywhere}
h3{font-size:1em;margin:1em 0 .3em}
a{color:var(--accent)}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9em;overflow-wrap:anywhere}
code{background:var(--code);padding:0 .25em;border-radius:3px}
.filters{display:flex;flex-wrap:wrap;gap:8px;margin:16px 0 8px}
.filters input,.filters select{font:inherit;color:inherit;background:var(--card);border:1px solid var(--line);
border-radius:6px;padding:6px 8px;min-width:0}
.filters input{flex:1 1 260px}
.filters select{flex:0 1 170px}
#count{color:var(--muted);margin:4px 0 12px}
ul.plugins{list-style:none;margin:0;padding:0;display:grid;gap:10px}
ul.plugins li,section.version{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:12px 14px}
ul.plugins li p{margin:.3em 0 0}
.name{font-weight:600;font-size:1.05em;overflow-wrap:anywhere}
.meta{color:var(--muted);font-size:.9em;overflow-wrap:anywhere}
.badge{display:inline-block;border:1px solid var(--line);border-radius:999px;padding:0 .55em;font-size:.8em;
margin-left:.35em;white-space:nowrap;vertical-align:1px}
.badge.bad{color:var(--bad);border-color:var(--bad);background:var(--bad-bg)}
.badge.ok{color:var(--ok);border-color:var(--ok)}
.badge.warn{color:var(--warn);border-color:var(--warn);background:var(--warn-bg)}
.desc{white-space:pre-wrap;overflow-wrap:anywhere}
nav.versions{margin:10px 0 16px;display:flex;flex-wrap:wrap;gap:6px}
nav.versions a{border:1px solid var(--line);border-radius:6px;padding:1px 8px;text-decoration:none;background:var(--card)}
section.version{margin:0 0 14px}
dl.facts{display:grid;grid-template-columns:minmax(110px,max-content) 1fr;gap:4px 14px;margin:8px 0}
dl.facts dt{color:var(--muted)}
dl.facts dd{margin:0;min-width:0;overflow-wrap:anywhere}
.alert{border-left:4px solid var(--bad);background:var(--bad-bg);padding:6px 10px;margin:8px 0;overflow-wrap:anywhere}
.alert.warn{border-color:var(--warn);background:var(--warn-bg)}
.note{border-left:4px solid var(--line);color:var(--muted);padding:4px 10px;margin:8px 0;overflow-wrap:anywhere}
nav.versions a.yanked{text-decoration:line-through;color:var(--muted)}
.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:.92em}
th,td{text-align:left;vertical-align:top;padding:4px 8px;border-bottom:1px solid var(--line);overflow-wrap:anywhere}
th{color:var(--muted);font-weight:600;white-space:nowrap}
table.params td:nth-child(-n+2){overflow-wrap:normal;white-space:nowrap}
.add{display:flex;gap:8px;align-items:center;margin-top:8px;flex-wrap:wrap}
.add code{user-select:all;padding:4px 8px;flex:1 1 auto}
.add button{font:inherit;font-size:.85em;color:inherit;background:var(--card);border:1px solid var(--line);
border-radius:6px;padding:3px 10px;cursor:pointer}
ul.change{margin:.2em 0;padding-left:1.2em}
footer{color:var(--muted);font-size:.85em;padding-top:10px;padding-bottom:30px;border-top:1px solid var(--line);margin-top:24px}
footer details{margin-top:.4em}
@media (max-width:600px){body{font-size:14px}dl.facts{grid-template-columns:1fr;gap:0}dl.facts dd{margin-bottom:6px}
.filters select{flex:1 1 45%}
table.params thead{display:none}table.params tr{display:block;border-bottom:1px solid var(--line);padding:4px 0}
table.params td,table.params td:nth-child(-n+2){display:block;border:0;padding:1px 0;white-space:normal;overflow-wrap:anywhere}
table.params td::before{content:attr(data-label) ": ";color:var(--muted)}}
"""

SCRIPT = """
(function(){
var q=document.getElementById('q');
if(q){
  var sel=['kind','owner','target','yanked'].map(function(n){return document.getElementById('f-'+n);});
  var rows=Array.prototype.slice.call(document.querySelectorAll('ul.plugins > li'));
  var count=document.getElementById('count');
  var apply=function(){
    var words=q.value.toLowerCase().split(/\\s+/).filter(Boolean), shown=0;
    rows.forEach(function(r){
      var d=r.dataset, ok=words.every(function(w){return d.search.indexOf(w)>=0;})
        &&(!sel[0].value||d.kind===sel[0].value)&&(!sel[1].value||d.owner===sel[1].value)
        &&(!sel[2].value||d.targets.split('\\n').indexOf(sel[2].value)>=0)
        &&(!sel[3].value||d.yanked===sel[3].value);
      r.hidden=!ok; if(ok){shown++;}
    });
    count.textContent=shown+' of '+rows.length+' plugins';
  };
  q.addEventListener('input',apply);
  sel.forEach(function(s){s.addEventListener('change',apply);});
  apply();
}
document.querySelectorAll('button.copy').forEach(function(b){
  b.addEventListener('click',function(){
    var c=document.getElementById(b.dataset.for), r=document.createRange();
    r.selectNodeContents(c); var s=window.getSelection(); s.removeAllRanges(); s.addRange(r);
    var done=function(){b.textContent='Copied';};
    if(navigator.clipboard){navigator.clipboard.writeText(c.textContent).then(done,function(){});}
    else{try{document.execCommand('copy');done();}catch(e){}}
  });
});
})();
"""


def _sha256(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode("ascii") + "'"


#: The policy of every page: the inline style and script above, nothing else from anywhere.
CSP = (f"default-src 'none'; script-src {_sha256(SCRIPT)}; style-src {_sha256(STYLE)}; "
       "img-src 'none'; base-uri 'none'; form-action 'none'")
