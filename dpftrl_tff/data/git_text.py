"""Commit messages and documentation as tokenized sentences (git_corpus).

What a commit message and a documentation file become, as
`dpftrl_tff.data.git_corpus`'s module docstring describes it: trailers, quoted
diffs, code and markup dropped, URLs and e-mail addresses removed,
sentences split, and tokens as TFF's StackOverflow `tokens` (lower case,
punctuation split off, English contractions split).
"""

import functools
import html.parser
import re
import sys
import unicodedata
from typing import Iterator, List, Optional, Sequence


_TRAILER_RE = re.compile(
    r'^\s*([A-Za-z][A-Za-z0-9]*-)*(by|to|id|Id|ID)\s*:|'
    r'^\s*(Cc|CC|Link|Links|Fixes|Bug|Closes|References|Change-Id|'
    r'Message-Id|Message-ID|Cherry-picked-from|git-svn-id|Signed-off|'
    r'Co-authored-by)\s*:', re.IGNORECASE)
_MERGE_RE = re.compile(r'^Merge (branch|tag|remote-tracking branch|pull '
                       r'request|commit|remote branch|branches|\') ')
_DIFF_START_RE = re.compile(r'^(diff --git |--- a/|\+\+\+ b/|@@ |index '
                            r'[0-9a-f]+\.\.|--- [^ ]+\t)')
_URL_RE = re.compile(r'(https?|ftp|git|ssh)://\S+|\bwww\.\S+', re.IGNORECASE)
# The local part starts where a run of its characters starts: without the
# look-behind, a long run with no "@" (a.b.c... in a pasted blob) is
# scanned again from each of its characters, quadratic in its length.
_EMAIL_RE = re.compile(r'<?(?<![\w.+-])[\w.+-]+@[\w-]+(\.[\w-]+)+>?')
_BULLET_RE = re.compile(r'^\s{0,3}([*+-]|\d+[.)])\s+')
# Scripts written without spaces between words, for which this project has
# no word segmenter (Thai, Lao, Myanmar and its extensions, Khmer and its
# symbols): a grapheme, a character with its combining marks (a consonant
# with its vowel signs and tone marks; in Khmer and Myanmar also the
# consonants stacked under it after the coeng or virama), is a token. A
# space in these scripts separates phrases and sentences.
_GRAPHEME_TOKEN_RANGES = (
    (0x0E00, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF), (0x19E0, 0x19FF),
    (0xA9E0, 0xA9FF), (0xAA60, 0xAA7F))
_STACKING_SIGNS = '\u17d2\u1039'   # Khmer coeng, Myanmar virama.
_GRAPHEME_SCRIPT = ''.join(f'\\u{a:04x}-\\u{b:04x}'
                           for a, b in _GRAPHEME_TOKEN_RANGES)
# A sentence ends at ". ", "? " or "! " (or the Devanagari danda, the Arabic
# question mark and full stop, the Armenian and Ethiopic full stops followed
# by a space); right after a CJK full stop, exclamation or question mark, a
# Khmer khan or a Myanmar full stop (no space is written after those); or
# at a space between two characters of the scripts above.
_SENTENCE_END_RE = re.compile(
    r'(?<=[.!?\u0964\u0965\u061f\u06d4\u0589\u1362])\s+(?=\S)'
    r'|(?<=[\u3002\uff01\uff1f\u17d4\u17d5\u104b])\s*(?=\S)'
    f'|(?<=[{_GRAPHEME_SCRIPT}])\\s+(?=[{_GRAPHEME_SCRIPT}])')
_CONTRACTION_RE = re.compile(r"^(.+?)(n't|'s|'re|'ve|'ll|'d|'m)$")
# Scripts written without spaces between words whose every character is a
# token of its own, as BERT's basic tokenizer does for CJK ideographs: CJK
# ideographs (unified, extensions A to F, compatibility), hiragana,
# katakana and half-width katakana.
_CHARACTER_TOKEN_RANGES = (
    (0x3040, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF),
    (0xFF66, 0xFF9F), (0x20000, 0x2A6DF), (0x2A700, 0x2CEAF),
    (0x2F800, 0x2FA1F))


# `_token_re()` restricted to ASCII text, where it has no marks or CJK to
# look for: twice as fast (tested equal on ASCII text).
_ASCII_TOKEN_RE = re.compile(
    r"[a-z0-9]+(?:[-_.][a-z0-9]+)*(?:'(?:t|s|re|ve|ll|d|m)\b)?|\S")


def _class_ranges(ranges) -> str:
  return ''.join(f'\\U{a:08x}-\\U{b:08x}' for a, b in ranges)


@functools.lru_cache(maxsize=None)
def _token_re() -> re.Pattern:
  """Words, CJK characters, graphemes of Thai, Lao, Khmer and Myanmar, or
  any other non-space character.

  A word is letters and digits of any script (Python's Unicode `\\w`
  without `_`), each followed by its combining marks (Unicode category M:
  accents in decomposed text, the vowel signs of Indic scripts), with inner
  `-`, `_` and `.` ("git-log", "foo.c", "2.0") and an English contraction
  at its end. Built on first use: listing the marks reads the whole
  Unicode database (0.15 s).
  """
  marks, start = [], None
  for code in range(sys.maxunicode + 2):
    is_mark = (code <= sys.maxunicode
               and unicodedata.category(chr(code)).startswith('M'))
    if is_mark and start is None:
      start = code
    elif not is_mark and start is not None:
      marks.append((start, code - 1))
      start = None
  characters = _class_ranges(_CHARACTER_TOKEN_RANGES)
  graphemes = _class_ranges(_GRAPHEME_TOKEN_RANGES)
  mark = f'[{_class_ranges(marks)}]'
  letter = f'[^\\W_{characters}{graphemes}]{mark}*'
  grapheme = (f'[{graphemes}]{mark}*'
              f'(?:(?<=[{_STACKING_SIGNS}])[{graphemes}]{mark}*)*')
  return re.compile(
      f"(?:{letter})+(?:[-_.](?:{letter})+)*(?:'(?:t|s|re|ve|ll|d|m)\\b)?"
      f'|[{characters}]|{grapheme}|\\S')


def tokenize(text: str) -> List[str]:
  """StackOverflow-style tokens: lower case, punctuation split off.

  Text is first composed (Unicode NFC) and lower-cased. Words are letters
  and digits of any script with their combining marks ("für", "ошибку",
  "हिन्दी") and keep inner hyphens, underscores and dots ("git-log",
  "foo.c", "2.0"); CJK ideographs and kana are a token each (no word
  boundaries are written in Chinese and Japanese); every other non-space
  character is a token of its own; English contractions split as in the
  Penn Treebank ("don't" -> "do", "n't"). Thai, Lao, Khmer and Myanmar,
  also written without word boundaries, give a token per grapheme (a
  character with its combining marks and stacked consonants): no word
  segmenter is shipped, so those scripts are modelled by characters.
  """
  if text.isascii():
    token_re = _ASCII_TOKEN_RE
  else:
    token_re = _token_re()
    text = unicodedata.normalize('NFC', text)
  text = text.lower().replace('\u2019', "'")
  out = []
  for token in token_re.findall(text):
    match = _CONTRACTION_RE.match(token)
    if match and token[0].isalnum():
      out.extend(match.groups())
    else:
      out.append(token)
  return out


def _strip_inline(text: str) -> str:
  return _EMAIL_RE.sub(' ', _URL_RE.sub(' ', text))


def _paragraph_sentences(lines: Sequence[str]) -> Iterator[str]:
  """Joins wrapped lines (bullets start anew) and splits at sentence ends."""
  items: List[List[str]] = []
  for line in lines:
    if _BULLET_RE.match(line) or not items:
      items.append([_BULLET_RE.sub('', line)])
    else:
      items[-1].append(line.strip())
  for item in items:
    text = ' '.join(part.strip() for part in item if part.strip())
    for sentence in _SENTENCE_END_RE.split(text):
      if sentence.strip():
        yield sentence


def _is_code_line(line: str) -> bool:
  return line.startswith('\t') or line.startswith('    ')


def message_sentences(message: str, *,
                      min_tokens_per_sentence: int = 2) -> List[str]:
  """A commit message's tokenized sentences (see the module docstring)."""
  # Line ends of any platform: \r\n (Windows), a lone \r (classic Mac OS).
  lines = message.replace('\r\n', '\n').replace('\r', '\n').split('\n')
  if not lines or _MERGE_RE.match(lines[0]):
    return []
  kept: List[Optional[str]] = []   # None separates paragraphs.
  in_diff = in_fence = False
  for index, line in enumerate(lines):
    # An indented line right after text continues it (a bullet's wrapped
    # line); after a blank line or code it is code.
    code = _is_code_line(line) and (not kept or kept[-1] is None)
    stripped = line.strip()
    if stripped.startswith('```'):
      in_fence = not in_fence
      kept.append(None)
      continue
    if in_fence:
      continue
    if _DIFF_START_RE.match(line):
      in_diff = True
    if in_diff:
      if not stripped:
        in_diff = False
      continue
    if stripped.startswith('-- >8 --') or stripped.startswith('--- >8 ---'):
      break   # Scissors: what follows is a patch.
    if (not stripped or stripped.startswith('>') or code or
        (index > 0 and _TRAILER_RE.match(line))):
      kept.append(None)
      continue
    kept.append(_strip_inline(line))
  out = []
  paragraph: List[str] = []
  for line in kept + [None]:
    if line is not None:
      paragraph.append(line)
      continue
    for sentence in _paragraph_sentences(paragraph):
      tokens = tokenize(sentence)
      if len(tokens) >= min_tokens_per_sentence:
        out.append(' '.join(tokens))
    paragraph = []
  return out


_ADOC_MARKUP_RE = re.compile(
    r'^(=+ |#+ |\[.*\]$|:[\w-]+:|\.[A-Za-z]|ifdef::|endif::|ifndef::|'
    r'include::|image::|//|\|===|\+$|[-=~^`*_.]{3,}$)')


# HTML elements whose text is not prose (dropped with their content), and
# those that end a paragraph.
_HTML_DROPPED = frozenset(('script', 'style', 'pre', 'textarea', 'template',
                           'svg', 'math', 'head'))
_HTML_BLOCKS = frozenset((
    'p', 'div', 'br', 'hr', 'li', 'ul', 'ol', 'dl', 'dt', 'dd', 'table',
    'tr', 'td', 'th', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'blockquote',
    'section', 'article', 'header', 'footer', 'nav', 'main', 'aside',
    'figure', 'figcaption', 'caption', 'title', 'body'))


class _HtmlText(html.parser.HTMLParser):
  """The text of an HTML page, a paragraph per block element."""

  def __init__(self):
    super().__init__(convert_charrefs=True)   # &amp; -> &
    self.parts: List[str] = []
    self.dropped = 0

  def handle_starttag(self, tag, attrs):
    del attrs
    if tag in _HTML_DROPPED:
      self.dropped += 1
    elif tag in _HTML_BLOCKS:
      self.parts.append('\n\n')

  def handle_endtag(self, tag):
    if tag in _HTML_DROPPED:
      self.dropped = max(0, self.dropped - 1)
    elif tag in _HTML_BLOCKS:
      self.parts.append('\n\n')

  def handle_data(self, data):
    if not self.dropped:
      self.parts.append(data)


def html_text(page: str) -> str:
  """An HTML page as plain paragraphs (blank-line separated) for
  `document_sentences`: tags removed, entities decoded, the contents of
  script, style, pre (code), head and similar elements dropped, a block
  element (p, div, li, h1, td, ...) a paragraph of its own."""
  parser = _HtmlText()
  parser.feed(page)
  parser.close()
  paragraphs = (' '.join(p.split())
                for p in re.split(r'\n\s*\n', ''.join(parser.parts)))
  return '\n\n'.join(p for p in paragraphs if p)


def document_sentences(text: str, *,
                       min_tokens_per_sentence: int = 3) -> List[str]:
  """A documentation file's tokenized sentences.

  Headings become sentences of their own; AsciiDoc / Markdown directives,
  attribute lines, tables, delimited and indented blocks are dropped; the
  remaining paragraphs are cut as commit bodies are.
  """
  out: List[str] = []
  paragraph: List[str] = []
  in_block = False

  def flush():
    for sentence in _paragraph_sentences(paragraph):
      # A tag is "<" to the next ">" with no "<" between: with [^>]*, a run
      # of "<" without ">" is scanned again from each, quadratic.
      tokens = tokenize(re.sub(r'[`*_]{1,2}|linkgit:|<[^<>]*>', ' ',
                               sentence))
      if len(tokens) >= min_tokens_per_sentence:
        out.append(' '.join(tokens))
    paragraph.clear()

  for line in text.replace('\r\n', '\n').replace('\r', '\n').split('\n'):
    stripped = line.strip()
    if re.fullmatch(r'(-{4,}|\.{4,}|`{3}.*|~{4,}|={4,}|\*{4,})', stripped):
      in_block = not in_block
      flush()
      continue
    if in_block:
      continue
    if not stripped or _is_code_line(line) or stripped.startswith('|'):
      flush()
      continue
    if _ADOC_MARKUP_RE.match(stripped):
      flush()
      heading = re.match(r'^(=+|#+)\s+(.*)$', stripped)
      if heading:
        paragraph.append(heading.group(2))
        flush()
      continue
    paragraph.append(_strip_inline(stripped))
  flush()
  return out
