"""Language-model stage, rules: what a model's refusal looks like, for ``bot.llm.tldr``.

A refusal that ignores the answer's form (the prompt asks for "TL;DR: " and the sentence,
or "NO TLDR") is refused by its form, whatever its language.  What these patterns catch
is one a model wraps in that form: said in the first person ("I cannot", "I'm sorry", "as
an AI") in each language a reader is likely to be offered, anywhere in the line.  Pure:
patterns and one function; linear in the line (literal words, bounded repeats).
"""

from __future__ import annotations

import re
import unicodedata

_REFUSALS = {
    "en": (
        r"\bi\s*['’]?\s*m\s+(?:sorry|afraid|unable|not\s+able)",
        r"\bi\s+am\s+(?:sorry|afraid|unable|not\s+able)",
        r"\bi\s+(?:can\s*['’]?\s*not|can['’]?t|cannot|won['’]?t|will\s+not|do\s+not|don['’]?t)\s+"
        r"(?:help|assist|comply|provide|summari[sz]e|do|fulfil+|answer|create|write)",
        r"\bi\s+apologi[sz]e",
        r"\bunfortunately,?\s+i\b",
        r"\bas\s+an\s+ai\b",
        r"\bas\s+a\s+(?:large\s+)?language\s+model",
        r"\bsorry,\s+(?:but\s+)?i\b",
    ),
    "de": (
        r"es\s+tut\s+mir\s+leid",
        r"\bleider\s+kann\s+ich",
        r"\bich\s+kann\s+(?:\w+\s+){0,3}nicht\s+(?:helfen|behilflich|zusammenfassen|erfüllen)",
        r"\bich\s+bin\s+nicht\s+in\s+der\s+lage",
        r"\bals\s+(?:ki|sprachmodell|künstliche\s+intelligenz)\b",
        r"\bentschuldigung\b",
    ),
    "fr": (
        r"\bje\s+suis\s+désolée?",
        r"\bdésolée?,",
        r"\bje\s+ne\s+(?:peux|suis\s+pas\s+en\s+mesure)",
        r"\ben\s+tant\s+qu['’]\s*(?:ia|intelligence\s+artificielle|modèle)",
        r"\bmalheureusement,?\s+je\b",
    ),
    "es": (
        r"\blo\s+siento\b",
        r"\bno\s+puedo\b",
        r"\blamentablemente,?\s+no\s+puedo",
        r"\bcomo\s+(?:ia|inteligencia\s+artificial|modelo\s+de\s+lenguaje)\b",
        r"\bno\s+estoy\s+en\s+condiciones",
    ),
    "it": (
        r"\bmi\s+dispiace\b",
        r"\bnon\s+posso\b",
        r"\bnon\s+sono\s+in\s+grado",
        r"\bcome\s+(?:ia|intelligenza\s+artificiale|modello\s+linguistico)\b",
    ),
    "pt": (
        r"\bdesculp[ea]\b",
        r"\bsinto\s+muito\b",
        r"\bnão\s+(?:posso|consigo)\b",
        r"\bcomo\s+(?:uma\s+)?(?:ia|inteligência\s+artificial|modelo\s+de\s+linguagem)\b",
    ),
    "nl": (
        r"\bhet\s+spijt\s+me\b",
        r"\bhelaas\s+kan\s+ik\b",
        r"\bik\s+kan\s+(?:\w+\s+){0,3}niet\s+(?:helpen|samenvatten)",
    ),
    "pl": (r"\bprzepraszam\b", r"\bnie\s+mogę\b", r"\bjako\s+(?:ai|sztuczna\s+inteligencja|model\s+językowy)\b"),
    "ru": (
        r"\bизвините\b",
        r"\bпростите\b",
        r"\bя\s+не\s+могу\b",
        r"\bне\s+могу\s+помочь",
        r"\bкак\s+(?:ии|языковая\s+модель)\b",
    ),
    "uk": (r"\bвибачте\b", r"\bя\s+не\s+можу\b"),
    "zh": (
        r"抱歉",
        r"对不起",
        r"對不起",
        r"我无法",
        r"我無法",
        r"我不能",
        r"无法(?:帮助|協助|协助|提供)",
        r"作为(?:一个)?(?:人工智能|ai|语言模型)",
    ),
    "ja": (r"申し訳", r"すみません", r"(?:お手伝い|お答え|対応)(?:することは)?できません", r"(?:ai|言語モデル)として"),
    "ko": (r"죄송", r"미안합니다", r"(?:도와|도움을\s*드릴|요약할)\s*수\s*없", r"(?:ai|언어\s*모델)로서"),
    "tr": (r"\büzgünüm\b", r"\bmaalesef\b", r"\byardımcı\s+olamam", r"\bbir\s+yapay\s+zeka\s+olarak"),
    "ar": (r"عذر[اً]", r"آسف", r"لا\s+أستطيع", r"لا\s+يمكنني", r"للأسف"),
    "hi": (r"क्षमा\s+करें", r"माफ़\s+करें", r"माफ\s+करें", r"मैं\s+(?:इसमें\s+)?(?:मदद\s+)?नहीं\s+कर\s+सकता"),
    "sv": (r"\btyvärr\b", r"\bjag\s+kan\s+inte\b", r"\bförlåt\b"),
    "da-no": (r"\bdesværre\b", r"\bdessverre\b", r"\bbeklager\b", r"\bjeg\s+kan\s+ikke\b"),
    "cs": (r"\bomlouvám\s+se\b", r"\bbohužel\b", r"\bnemohu\b"),
    "vi": (r"\bxin\s+lỗi\b", r"\btôi\s+không\s+thể\b", r"\brất\s+tiếc\b"),
    "id": (r"\bmaaf\b", r"\bsaya\s+tidak\s+(?:bisa|dapat)\b", r"\bsayangnya\b"),
    "he": (r"מצטער", r"אני\s+לא\s+יכול", r"לצערי"),
    "el": (r"λυπάμαι", r"δεν\s+μπορώ", r"δυστυχώς"),
    "fa": (r"متاسفم", r"متأسفم", r"نمی‌?\s*توانم"),
}

_ANY_REFUSAL = re.compile("|".join(f"(?:{pattern})" for patterns in _REFUSALS.values() for pattern in patterns))
LANGUAGES = tuple(sorted(_REFUSALS))  # the languages whose refusals are known here


def is_refusal(text: str) -> bool:
    """Whether *text* says, in one of ``LANGUAGES``, that the model will not do the task."""
    return _ANY_REFUSAL.search(unicodedata.normalize("NFKC", text).casefold()) is not None
