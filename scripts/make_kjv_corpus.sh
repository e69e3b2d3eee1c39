#!/bin/sh
# Regenerates crates/rnn-train/data/kjv.txt.gz, the built-in text corpus of
# `rnn train --model gpt --data text:`: the King James Version of the Bible (1611; public
# domain outside the UK, where Crown copyright applies), dumped with the `bible` program of
# Debian's `bible-kjv` package from the text in `bible-kjv-text` (Chip Chapin's Bible
# Retrieval System data).
#   apt-get install bible-kjv bible-kjv-text
# The output is the program's plain listing (book and chapter headings, one verse a
# paragraph, lines wrapped at 79 columns) with the verse numbers removed; gzip -n keeps the
# archive byte-identical between runs.
set -eu
out="$(dirname "$0")/../crates/rnn-train/data/kjv.txt.gz"
command -v bible >/dev/null || { echo "the bible program is missing: apt-get install bible-kjv bible-kjv-text" >&2; exit 1; }
bible gen1:1-rev22:21 | sed -E 's/^ +[0-9]+ //' | gzip -9 -n > "$out"
echo "wrote $out ($(wc -c < "$out") bytes)"
