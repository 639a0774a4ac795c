//! The generic-netlink bytes of the few ethtool requests gputune makes, written and read by
//! hand: a netlink header, a genetlink header, then type-length-value attributes padded to
//! four bytes (`include/uapi/linux/netlink.h`, `genetlink.h`, `ethtool_netlink.h`). Pure
//! functions over byte slices, so real kernel replies captured in tests parse the same way
//! the live ones do.

/// `NLMSG_ERROR`: an error or, with code 0, an acknowledgement.
const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`: the end of a dump.
const NLMSG_DONE: u16 = 3;
pub const NLM_F_REQUEST: u16 = 1;
pub const NLM_F_ACK: u16 = 4;
/// In an error message: the original request was cut to its header.
const NLM_F_CAPPED: u16 = 0x100;
/// In an error message: extended-ack attributes follow.
const NLM_F_ACK_TLVS: u16 = 0x200;
/// `NLMSGERR_ATTR_MSG`: the kernel's text for the error.
const NLMSGERR_ATTR_MSG: u16 = 1;
/// Attribute type bits that say how the payload is laid out, not what it is.
const NLA_TYPE_MASK: u16 = 0x3fff;
/// `NLA_F_NESTED`: set on nests the request builds (ethtool's policies require it).
const NLA_F_NESTED: u16 = 0x8000;

/// The controller family, which maps family names to ids.
pub const GENL_ID_CTRL: u16 = 0x10;
pub const CTRL_CMD_GETFAMILY: u8 = 3;
pub const CTRL_ATTR_FAMILY_ID: u16 = 1;
pub const CTRL_ATTR_FAMILY_NAME: u16 = 2;

const NLMSG_HDRLEN: usize = 16;
const GENL_HDRLEN: usize = 4;

fn align(n: usize) -> usize {
    (n + 3) & !3
}

/// Builds the attributes of one request.
#[derive(Debug, Default, Clone)]
pub struct Attrs {
    buf: Vec<u8>,
    /// Where each open nest's length field sits.
    open: Vec<usize>,
}

impl Attrs {
    pub fn new() -> Attrs {
        Attrs::default()
    }

    fn put(&mut self, kind: u16, data: &[u8]) -> &mut Attrs {
        let len = 4 + data.len();
        // Payloads here are a few bytes; the length field is 16 bits by the protocol.
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(data);
        self.buf.resize(align(self.buf.len()), 0);
        self
    }

    pub fn u8(&mut self, kind: u16, v: u8) -> &mut Attrs {
        self.put(kind, &[v])
    }

    pub fn u32(&mut self, kind: u16, v: u32) -> &mut Attrs {
        self.put(kind, &v.to_ne_bytes())
    }

    /// A NUL-terminated string.
    pub fn string(&mut self, kind: u16, v: &str) -> &mut Attrs {
        let mut data = v.as_bytes().to_vec();
        data.push(0);
        self.put(kind, &data)
    }

    /// A flag: present means true.
    pub fn flag(&mut self, kind: u16) -> &mut Attrs {
        self.put(kind, &[])
    }

    /// Opens a nest; every attribute until [`Attrs::end`] goes inside it.
    pub fn begin(&mut self, kind: u16) -> &mut Attrs {
        self.open.push(self.buf.len());
        self.put(kind | NLA_F_NESTED, &[])
    }

    pub fn end(&mut self) -> &mut Attrs {
        if let Some(at) = self.open.pop() {
            let len = (self.buf.len() - at) as u16;
            self.buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
        }
        self
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

/// One request: netlink header (type = the family id), genetlink header, attributes.
pub fn request(family: u16, cmd: u8, version: u8, flags: u16, seq: u32, attrs: &Attrs) -> Vec<u8> {
    let body = attrs.bytes();
    let len = NLMSG_HDRLEN + GENL_HDRLEN + body.len();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&family.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&[cmd, version, 0, 0]);
    out.extend_from_slice(body);
    out
}

/// One attribute of a reply: its type (layout bits cleared) and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr<'a> {
    pub kind: u16,
    pub data: &'a [u8],
}

impl<'a> Attr<'a> {
    pub fn u8(&self) -> Option<u8> {
        self.data.first().copied()
    }

    pub fn u16(&self) -> Option<u16> {
        Some(u16::from_ne_bytes(self.data.get(..2)?.try_into().ok()?))
    }

    pub fn u32(&self) -> Option<u32> {
        Some(u32::from_ne_bytes(self.data.get(..4)?.try_into().ok()?))
    }

    /// A string up to its NUL, lossily decoded.
    pub fn string(&self) -> String {
        let end = self
            .data
            .iter()
            .position(|b| *b == 0)
            .unwrap_or(self.data.len());
        String::from_utf8_lossy(&self.data[..end]).into_owned()
    }

    /// The attributes nested inside this one.
    pub fn nested(&self) -> Result<Vec<Attr<'a>>, Malformed> {
        attrs(self.data)
    }
}

/// Why bytes from the kernel are not the netlink the reader expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("malformed netlink attribute at byte {at} (length {len} of {of})")]
    Attr { at: usize, len: usize, of: usize },
    #[error("malformed netlink message at byte {at} (length {len} of {of})")]
    Message { at: usize, len: usize, of: usize },
    #[error("a genetlink message shorter than its header")]
    ShortGenl,
    #[error("a netlink error message without its code")]
    NoCode,
}

/// Splits a run of attributes; a length that runs past the end is malformed.
pub fn attrs(buf: &[u8]) -> Result<Vec<Attr<'_>>, Malformed> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 4 <= buf.len() {
        let len = u16::from_ne_bytes([buf[at], buf[at + 1]]) as usize;
        let kind = u16::from_ne_bytes([buf[at + 2], buf[at + 3]]) & NLA_TYPE_MASK;
        if len < 4 || at + len > buf.len() {
            return Err(Malformed::Attr {
                at,
                len,
                of: buf.len(),
            });
        }
        out.push(Attr {
            kind,
            data: &buf[at + 4..at + len],
        });
        at += align(len);
    }
    Ok(out)
}

/// The first attribute of `kind`.
pub fn find<'a, 'b>(attrs: &'b [Attr<'a>], kind: u16) -> Option<&'b Attr<'a>> {
    attrs.iter().find(|a| a.kind == kind)
}

/// One message of a reply datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message<'a> {
    /// A genetlink message: its command and attributes' bytes.
    Genl {
        cmd: u8,
        payload: &'a [u8],
    },
    /// The kernel refused: the errno (positive) and its extended-ack text, if any.
    Error {
        errno: i32,
        text: Option<String>,
    },
    /// The acknowledgement of a request (an error message with code 0).
    Ack,
    Done,
}

/// Splits a reply datagram into its messages.
pub fn messages(buf: &[u8]) -> Result<Vec<Message<'_>>, Malformed> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + NLMSG_HDRLEN <= buf.len() {
        let word = |i: usize| u32::from_ne_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
        let len = word(at) as usize;
        let kind = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
        let flags = u16::from_ne_bytes([buf[at + 6], buf[at + 7]]);
        if len < NLMSG_HDRLEN || at + len > buf.len() {
            return Err(Malformed::Message {
                at,
                len,
                of: buf.len(),
            });
        }
        let body = &buf[at + NLMSG_HDRLEN..at + len];
        out.push(match kind {
            NLMSG_DONE => Message::Done,
            NLMSG_ERROR => error(body, flags)?,
            _ => {
                if body.len() < GENL_HDRLEN {
                    return Err(Malformed::ShortGenl);
                }
                Message::Genl {
                    cmd: body[0],
                    payload: &body[GENL_HDRLEN..],
                }
            }
        });
        at += align(len);
    }
    Ok(out)
}

/// `struct nlmsgerr`: the (negative) error code, the request's header (or all of it when
/// not capped), then extended-ack attributes.
fn error(body: &[u8], flags: u16) -> Result<Message<'_>, Malformed> {
    let code = body
        .get(..4)
        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or(Malformed::NoCode)?;
    if code == 0 {
        return Ok(Message::Ack);
    }
    let mut text = None;
    if flags & NLM_F_ACK_TLVS != 0 && body.len() >= 4 + NLMSG_HDRLEN {
        let request_len = if flags & NLM_F_CAPPED != 0 {
            NLMSG_HDRLEN
        } else {
            u32::from_ne_bytes([body[4], body[5], body[6], body[7]]) as usize
        };
        if let Some(tlvs) = body.get(4 + align(request_len)..)
            && let Ok(list) = attrs(tlvs)
        {
            text = find(&list, NLMSGERR_ATTR_MSG).map(Attr::string);
        }
    }
    Ok(Message::Error {
        errno: code.saturating_neg(),
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_nests_round_trip() {
        let mut a = Attrs::new();
        a.begin(1).string(2, "eth0").u32(3, 7).end().u8(11, 1);
        let req = request(0x22, 16, 1, NLM_F_REQUEST | NLM_F_ACK, 9, &a);
        assert_eq!(req.len() % 4, 0);
        assert_eq!(
            u32::from_ne_bytes(req[..4].try_into().unwrap()) as usize,
            req.len()
        );
        let list = attrs(&req[20..]).unwrap();
        assert_eq!(list.len(), 2);
        let header = list[0].nested().unwrap();
        assert_eq!(find(&header, 2).unwrap().string(), "eth0");
        assert_eq!(find(&header, 3).unwrap().u32(), Some(7));
        assert_eq!(list[1].u8(), Some(1));
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        assert!(attrs(&[8, 0, 1, 0, 1]).is_err());
        assert!(attrs(&[2, 0, 1, 0]).is_err());
        assert_eq!(attrs(&[]).unwrap(), vec![]);
        let mut msg = vec![0u8; 16];
        msg[..4].copy_from_slice(&40u32.to_ne_bytes());
        assert!(messages(&msg).is_err());
        // An error message too short for its code.
        msg[..4].copy_from_slice(&16u32.to_ne_bytes());
        msg[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        assert!(messages(&msg).is_err());
        let short = Attr {
            kind: 1,
            data: &[1],
        };
        assert_eq!(short.u32(), None);
        assert_eq!(short.u8(), Some(1));
    }
}
