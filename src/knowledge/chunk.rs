//! Chunking that follows the structure of a document: sections by heading, then
//! paragraphs packed up to a bounded size, with the last paragraph of a chunk
//! repeated at the start of the next (a small overlap) so no sentence loses its
//! context. Each chunk keeps its heading path for the citation's title.

/// Chunks aim at this many characters; a single longer paragraph is split.
pub const CHUNK_CHARS: usize = 900;
/// A paragraph repeated into the next chunk as overlap is at most this long.
const OVERLAP_CHARS: usize = 200;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// `Title › Section › Subsection`.
    pub heading: String,
    /// The last of the path, `Subsection` (the title where the chunk is under
    /// no heading of its own): what BM25 counts with the text. Kept apart, as a
    /// title may hold ` › ` itself.
    pub own_heading: String,
    pub text: String,
}

pub fn chunks(title: &str, text: &str) -> Vec<Chunk> {
    let mut out = Vec::new();
    let mut path: Vec<(usize, String)> = Vec::new();
    let mut paragraphs: Vec<String> = Vec::new();
    let flush = |path: &[(usize, String)], paragraphs: &mut Vec<String>, out: &mut Vec<Chunk>| {
        let heading = heading_path(title, path);
        let own = path.last().map_or(title, |(_, name)| name.as_str());
        pack((&heading, own), std::mem::take(paragraphs), out);
    };
    for block in text.split("\n\n").map(str::trim).filter(|b| !b.is_empty()) {
        let mut lines = block.lines();
        let first = lines.next().unwrap_or_default();
        if let Some((level, name)) = heading(first) {
            flush(&path, &mut paragraphs, &mut out);
            path.retain(|(l, _)| *l < level);
            path.push((level, name));
            let rest: Vec<&str> = lines.collect();
            if !rest.is_empty() {
                paragraphs.push(rest.join("\n"));
            }
        } else {
            paragraphs.push(block.to_string());
        }
    }
    flush(&path, &mut paragraphs, &mut out);
    out
}

fn heading(line: &str) -> Option<(usize, String)> {
    let level = line.chars().take_while(|c| *c == '#').count();
    let name = line[level..].strip_prefix(' ')?.trim();
    (1..=6).contains(&level).then(|| (level, name.to_string()))
}

fn heading_path(title: &str, path: &[(usize, String)]) -> String {
    let mut parts: Vec<&str> = vec![title];
    parts.extend(path.iter().map(|(_, n)| n.as_str()).filter(|n| *n != title));
    parts.join(" › ")
}

fn pack((heading, own): (&str, &str), paragraphs: Vec<String>, out: &mut Vec<Chunk>) {
    let mut current = String::new();
    let mut last = String::new();
    for paragraph in paragraphs.into_iter().flat_map(split_long) {
        if !current.is_empty() && current.len() + paragraph.len() > CHUNK_CHARS {
            out.push(Chunk {
                heading: heading.to_string(),
                own_heading: own.to_string(),
                text: std::mem::take(&mut current),
            });
            if last.len() <= OVERLAP_CHARS {
                current.push_str(&last);
            }
        }
        if !current.is_empty() {
            current.push_str("\n\n");
        }
        current.push_str(&paragraph);
        last = paragraph;
    }
    if !current.trim().is_empty() {
        out.push(Chunk {
            heading: heading.to_string(),
            own_heading: own.to_string(),
            text: current,
        });
    }
}

/// A paragraph longer than a chunk is cut at sentence ends (or spaces) near the size.
fn split_long(paragraph: String) -> Vec<String> {
    if paragraph.len() <= CHUNK_CHARS {
        return vec![paragraph];
    }
    let mut parts = Vec::new();
    let mut rest = paragraph.as_str();
    while rest.len() > CHUNK_CHARS {
        let window = &rest[..floor_char(rest, CHUNK_CHARS)];
        let cut = window
            .rfind(". ")
            .map(|i| i + 1)
            .or_else(|| window.rfind(' '))
            .unwrap_or(window.len());
        let cut = cut.max(1);
        parts.push(rest[..cut].trim().to_string());
        rest = rest[cut..].trim_start();
    }
    if !rest.is_empty() {
        parts.push(rest.to_string());
    }
    parts
}

fn floor_char(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_keep_their_heading_path() {
        let text = "# Returns\n\nIntro.\n\n## How to return\n\nStep one.\n\n### Labels\n\nPrinted.\n\n## Refunds\n\nFive days.";
        let got: Vec<(String, String)> = chunks("Returns", text)
            .into_iter()
            .map(|c| (c.heading, c.text))
            .collect();
        assert_eq!(
            got,
            [
                ("Returns".into(), "Intro.".into()),
                ("Returns › How to return".into(), "Step one.".into()),
                ("Returns › How to return › Labels".into(), "Printed.".into()),
                ("Returns › Refunds".into(), "Five days.".into()),
            ]
        );
    }

    /// BM25 counts a chunk's own heading with its text; a title that holds the
    /// path's separator itself stays whole.
    #[test]
    fn a_chunk_keeps_its_own_heading_whole_beside_its_path() {
        let text = "Intro.\n\n## Express\n\nOne day.";
        let got: Vec<(String, String)> = chunks("Help › Shipping", text)
            .into_iter()
            .map(|c| (c.heading, c.own_heading))
            .collect();
        assert_eq!(
            got,
            [
                ("Help › Shipping".into(), "Help › Shipping".into()),
                ("Help › Shipping › Express".into(), "Express".into()),
            ]
        );
    }

    #[test]
    fn long_sections_are_bounded_and_overlap() {
        let paragraph = "A sentence about shipping times. ".repeat(5);
        let text = vec![paragraph.trim().to_string(); 12].join("\n\n");
        let got = chunks("Doc", &text);
        assert!(got.len() > 1);
        assert!(
            got.iter()
                .all(|c| c.text.len() <= CHUNK_CHARS + OVERLAP_CHARS + 2)
        );
        let first_last = got[0].text.rsplit("\n\n").next().unwrap();
        assert!(
            got[1].text.starts_with(first_last),
            "the next chunk repeats the last paragraph"
        );
        let huge = "word ".repeat(1000);
        assert!(
            chunks("Doc", &huge)
                .iter()
                .all(|c| c.text.len() <= CHUNK_CHARS)
        );
    }
}
