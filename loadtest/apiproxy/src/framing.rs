//! Where a watch body's events end, for hooks that pass on whole events only (a fault that cuts
//! or expires a watch must not cut one in half): JSON watch events are lines, protobuf ones are
//! frames of a 4-byte big-endian length and that many bytes (`Content-Type:
//! application/vnd.kubernetes.protobuf;stream=watch`).

use axum::http::{header, response};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchFraming {
    Lines,
    LengthPrefixed,
}

impl WatchFraming {
    /// The framing of a watch response, from its head.
    pub fn of(head: &response::Parts) -> Self {
        let content_type = head.headers.get(header::CONTENT_TYPE);
        let protobuf = content_type
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("protobuf"));
        match protobuf {
            true => WatchFraming::LengthPrefixed,
            false => WatchFraming::Lines,
        }
    }

    /// Where the first whole event in `pending` ends, if one is there.
    pub fn event_end(self, pending: &[u8]) -> Option<usize> {
        match self {
            WatchFraming::Lines => pending.iter().position(|b| *b == b'\n').map(|i| i + 1),
            WatchFraming::LengthPrefixed => {
                let length: [u8; 4] = pending.get(..4)?.try_into().ok()?;
                let end = 4 + u32::from_be_bytes(length) as usize;
                (pending.len() >= end).then_some(end)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_ends_after_its_newline_and_a_frame_after_its_length() {
        assert_eq!(WatchFraming::Lines.event_end(b"{}\n{"), Some(3));
        assert_eq!(WatchFraming::Lines.event_end(b"{"), None);
        let frame = [0, 0, 0, 2, b'\n', b'x', 0];
        let framed = WatchFraming::LengthPrefixed;
        assert_eq!(
            framed.event_end(&frame),
            Some(6),
            "its newline is a byte like any other"
        );
        assert_eq!(framed.event_end(&frame[..5]), None);
        assert_eq!(framed.event_end(&frame[..3]), None);
    }

    #[test]
    fn a_protobuf_watch_is_told_by_its_content_type() {
        let head = |content_type: &str| {
            let response = axum::http::Response::builder()
                .header(header::CONTENT_TYPE, content_type)
                .body(())
                .unwrap();
            response.into_parts().0
        };
        let protobuf = head("application/vnd.kubernetes.protobuf;stream=watch");
        assert_eq!(WatchFraming::of(&protobuf), WatchFraming::LengthPrefixed);
        assert_eq!(
            WatchFraming::of(&head("application/json")),
            WatchFraming::Lines
        );
    }
}
