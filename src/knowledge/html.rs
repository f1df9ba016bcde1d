//! Plain text from HTML, for knowledge pages: scripts, styles and navigation are
//! dropped, block elements become paragraph breaks and headings become Markdown
//! headings (so chunking follows them), entities are decoded.

/// The page's `<title>` (or first `<h1>`) and its text.
pub fn to_text(html: &str) -> (Option<String>, String) {
    let mut out = String::new();
    let mut title = None;
    let mut rest = html;
    let mut skip_until: Option<&'static str> = None;
    while let Some(start) = rest.find('<') {
        if skip_until.is_none() {
            out.push_str(&decode(&rest[..start]));
        }
        let Some(end) = rest[start..].find('>') else {
            break;
        };
        let tag = rest[start + 1..start + end].trim().to_ascii_lowercase();
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        let closing = tag.starts_with('/');
        rest = &rest[start + end + 1..];
        if let Some(until) = skip_until {
            if closing && name == until {
                skip_until = None;
            }
            continue;
        }
        match (name.as_str(), closing) {
            ("script" | "style" | "nav" | "footer" | "noscript" | "svg", false) => {
                skip_until = Some(match name.as_str() {
                    "script" => "script",
                    "style" => "style",
                    "nav" => "nav",
                    "footer" => "footer",
                    "noscript" => "noscript",
                    _ => "svg",
                })
            }
            ("title", false) => {
                if let Some(close) = rest.to_ascii_lowercase().find("</title>") {
                    title = Some(decode(&rest[..close]).trim().to_string());
                    rest = &rest[close + 8..];
                }
            }
            ("h1" | "h2" | "h3" | "h4", false) => {
                let level = name[1..].parse::<usize>().unwrap_or(2);
                out.push_str(&format!("\n\n{} ", "#".repeat(level)));
            }
            (
                "p" | "div" | "section" | "article" | "li" | "tr" | "br" | "h1" | "h2" | "h3"
                | "h4" | "ul" | "ol" | "table",
                _,
            ) => out.push_str("\n\n"),
            _ => {}
        }
    }
    if skip_until.is_none() {
        out.push_str(&decode(rest));
    }
    let text = out
        .split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty() && p.chars().any(|c| c.is_alphanumeric()))
        .collect::<Vec<_>>()
        .join("\n\n");
    let title = title.filter(|t| !t.is_empty()).or_else(|| {
        text.lines()
            .find_map(|l| l.strip_prefix("# "))
            .map(str::to_string)
    });
    (title, text)
}

fn decode(s: &str) -> String {
    s.replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}
