"""What the HTML page writes every value and every verdict with: escaped text, and verdict badges.

A verdict is a coloured badge with its word and an inline SVG icon. No emoji: a browser without an emoji font
(headless Chromium on a plain Debian machine, many servers and CI runners) draws those as empty boxes, and an
SVG needs no font at all. The Markdown report keeps its emoji (GitHub renders them with its own images).
"""

from __future__ import annotations

from html import escape

from ..results import Verdict
from . import common
from .common import Shown
from .weigh import WORDS

# 16×16 line drawings in the badge's text colour.
_ICONS = {
    Verdict.VERIFIED: '<path d="M3 8.5l3.2 3.2L13 4.5"/>',
    Verdict.CPU_CHECKED: '<rect x="1.5" y="1.5" width="13" height="13" rx="2"/><path d="M4.5 8.5l2.5 2.5 4.5-5"/>',
    Verdict.BUILT: '<path d="M2 5l6-3 6 3v6l-6 3-6-3zM2 5l6 3 6-3M8 8v6"/>',
    Verdict.FAILED: '<path d="M4 4l8 8M12 4l-8 8"/>',
    Verdict.EXPECTED_FAILURE: '<path d="M8 1.8l6.5 12h-13zM8 6.5v3.3M8 12v.2"/>',
    Verdict.UNEXPECTED_PASS: '<circle cx="8" cy="8" r="6.5"/><path d="M8 4.5v4.5M8 11.3v.2"/>',
    Verdict.INCOMPATIBLE: '<circle cx="8" cy="8" r="6.5"/><path d="M3.5 12.5l9-9"/>',
    Verdict.SKIPPED: '<path d="M2.5 3.5l5 4.5-5 4.5zM8.5 3.5l5 4.5-5 4.5z"/>',
}
_CLAIMED = '<circle cx="8" cy="8" r="6.5"/><path d="M6 6.2a2 2 0 1 1 2.6 1.9c-.4.2-.6.5-.6.9v.6M8 11.6v.2"/>'

_SVG = ('<svg class="icon" viewBox="0 0 16 16" aria-hidden="true" fill="none" stroke="currentColor" '
        'stroke-width="2" stroke-linecap="round" stroke-linejoin="round">{}</svg>')

CSS = """
.v{display:inline-flex;align-items:center;gap:.25em;border-radius:3px;padding:0 .4rem;font-size:.8rem;
white-space:nowrap}.v svg.icon{width:1.05em;height:1.05em;flex:none}
.v-verified{background:#1a7f37;color:#fff}.v-cpu-checked{background:#dafbe1;color:#116329}
.v-failed,.v-unexpected-pass{background:#cf222e;color:#fff}.v-expected-failure{background:#fff8c5;color:#7d4e00}
.v-incompatible,.v-skipped{background:#eaeef2;color:#57606a}.v-built{background:#ddf4ff;color:#0a3069}
.v-claimed{background:#fff;color:#7d4e00;border:1px dashed #9a6700}.v .marks{font-size:.75rem}
"""


def text(value: object) -> str:
    """A value from the results as HTML text or attribute: escaped, terminal escapes and control characters
    made visible (`common.plain`)."""
    return escape(common.plain("" if value is None else str(value)), quote=True)


def shown_badge(shown: Shown, title: str | None = None) -> str:
    """What a report says of a cell as a badge: a record nobody vouches for shows its marks' words, and where it
    would be verified, `claimed` with a question mark (never the verified badge)."""
    hover = f' title="{text(title)}"' if title else ""
    icon = _CLAIMED if shown.claimed else _ICONS.get(shown.verdict, "")
    marks = " · ".join(dict.fromkeys(shown_words(shown)))
    return (f'<span class="v v-{shown.word}"{hover}>{_SVG.format(icon)}{text(shown.word)}'
            + (f' <span class="marks">({text(marks)})</span>' if marks else "") + "</span>")


def shown_words(shown: Shown) -> list[str]:
    return [WORDS[m] for m, _ in shown.marks]


# The answer's states (common.ANSWER_MARKS) drawn as the verdicts they stand for
_STATE_OF = {"verified": Verdict.VERIFIED, "cpu-only": Verdict.CPU_CHECKED, "failed": Verdict.FAILED,
             "as-declared": Verdict.EXPECTED_FAILURE}


def state_badge(state: str) -> str:
    """The answer's state as a badge, in words and an icon (no emoji); `nothing` as a plain dash and its words."""
    verdict = _STATE_OF.get(state)
    if verdict is None:
        return f'<span class="none">— {text(common.ANSWER_WORDS["nothing"])}</span>'
    return (f'<span class="v v-{verdict.value}">{_SVG.format(_ICONS[verdict])}'
            f"{text(common.ANSWER_WORDS[state])}</span>")


def badge(verdict: Verdict, title: str | None = None) -> str:
    """The verdict as a badge: icon and word, the reason on hover when given."""
    hover = f' title="{text(title)}"' if title else ""
    return (f'<span class="v v-{verdict.value}"{hover}>{_SVG.format(_ICONS.get(verdict, ""))}'
            f"{text(verdict.value)}</span>")
